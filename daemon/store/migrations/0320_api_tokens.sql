-- Long-lived API tokens for automation (issue 31): Authorization: Bearer
-- on the /api routes their scope allows, with or without 2FA. Only the
-- token's hash is kept; names are unique, so the audit log names one.
CREATE TABLE api_tokens (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	name TEXT NOT NULL UNIQUE,
	scope TEXT NOT NULL CHECK (scope IN ('read', 'write')),
	token_hash TEXT NOT NULL UNIQUE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	last_used_at INTEGER,
	last_used_addr TEXT NOT NULL DEFAULT ''
);
