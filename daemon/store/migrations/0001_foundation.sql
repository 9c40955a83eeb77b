-- Key/value settings: operator password hash, domain, bind address and the
-- like. Values are text; callers own their encoding.
CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);

-- Dashboard sessions. Only the SHA-256 of the token is kept, so a copy of
-- the database cannot be replayed as a cookie.
CREATE TABLE sessions (
	token_hash TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	client_addr TEXT NOT NULL DEFAULT '',
	user_agent TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_expires ON sessions(expires_at);

-- Audit log of authentication and security events.
CREATE TABLE audit_log (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	created_at INTEGER NOT NULL,
	kind TEXT NOT NULL,
	client_addr TEXT NOT NULL DEFAULT '',
	user_agent TEXT NOT NULL DEFAULT '',
	detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_created ON audit_log(created_at DESC, id DESC);
