-- The server's own SSH key pairs (spec §4.2 ssh-keys rows). The default
-- key's public half goes into machines' authorized_keys at bootstrap.
-- private_sealed is the OpenSSH-format private key sealed with the key file
-- (aad "sshkey:<id>"); public_key is the authorized_keys line.
CREATE TABLE ssh_keys (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	key_type TEXT NOT NULL,
	public_key TEXT NOT NULL,
	fingerprint TEXT NOT NULL,
	private_sealed TEXT NOT NULL,
	is_default INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)),
	created_at INTEGER NOT NULL
);
-- At most one default; the code keeps "exactly one while any key exists".
CREATE UNIQUE INDEX ssh_keys_one_default ON ssh_keys(is_default) WHERE is_default = 1;

-- How many machines use each key: the key list's machine_count. Empty until
-- machines exist; the migration that adds machines (with a nullable
-- machines.ssh_key_id) replaces this view with
--   SELECT ssh_key_id, COUNT(*) AS machine_count FROM machines
--   WHERE ssh_key_id IS NOT NULL GROUP BY ssh_key_id
-- and the list query stays as it is.
CREATE VIEW ssh_key_machine_counts AS
	SELECT CAST(NULL AS TEXT) AS ssh_key_id, 0 AS machine_count WHERE 0;
