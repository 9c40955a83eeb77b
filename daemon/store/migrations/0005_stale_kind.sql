-- Stale-token attempts now also record refused tunnel credentials (an frpc
-- presenting a wrong or deleted machine secret), told apart by kind.
ALTER TABLE stale_token_attempts ADD COLUMN kind TEXT NOT NULL DEFAULT 'bootstrap';
CREATE INDEX stale_token_attempts_group ON stale_token_attempts(kind, client_addr, reason, created_at);
