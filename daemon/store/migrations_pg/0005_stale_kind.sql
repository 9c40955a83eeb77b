-- PostgreSQL's form of migrations/0005_stale_kind.sql (see there).
ALTER TABLE stale_token_attempts ADD COLUMN kind TEXT NOT NULL DEFAULT 'bootstrap';
CREATE INDEX stale_token_attempts_group ON stale_token_attempts(kind, client_addr, reason, created_at);
