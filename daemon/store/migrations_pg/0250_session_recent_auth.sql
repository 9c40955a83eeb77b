-- PostgreSQL's form of migrations/0250_session_recent_auth.sql (see there).
ALTER TABLE sessions ADD COLUMN authenticated_at BIGINT NOT NULL DEFAULT 0;
