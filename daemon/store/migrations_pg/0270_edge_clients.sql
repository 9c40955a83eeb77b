-- PostgreSQL's form of migrations/0270_edge_clients.sql (see there).
ALTER TABLE edges ADD COLUMN tunnel_port INTEGER NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN home_edge TEXT NOT NULL DEFAULT '';
