-- PostgreSQL's form of migrations/0003_ssh_keys.sql (see there).
CREATE TABLE ssh_keys (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	key_type TEXT NOT NULL,
	public_key TEXT NOT NULL,
	fingerprint TEXT NOT NULL,
	private_sealed TEXT NOT NULL,
	is_default BIGINT NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)),
	created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX ssh_keys_one_default ON ssh_keys(is_default) WHERE is_default = 1;

CREATE VIEW ssh_key_machine_counts AS
	SELECT CAST(NULL AS TEXT) AS ssh_key_id, CAST(0 AS BIGINT) AS machine_count WHERE false;
