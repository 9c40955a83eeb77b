-- Passkeys and their ceremonies (see the SQLite migration).
CREATE TABLE passkeys (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	credential_id TEXT NOT NULL UNIQUE,
	credential TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	last_used_at BIGINT
);
CREATE TABLE webauthn_ceremonies (
	id TEXT PRIMARY KEY,
	kind TEXT NOT NULL,
	session TEXT NOT NULL,
	expires_at BIGINT NOT NULL
);
