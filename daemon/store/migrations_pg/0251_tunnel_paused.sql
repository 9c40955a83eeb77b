-- PostgreSQL's form of migrations/0251_tunnel_paused.sql (see there).
ALTER TABLE tunnels ADD COLUMN paused BIGINT NOT NULL DEFAULT 0;
