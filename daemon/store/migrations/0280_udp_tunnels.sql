-- sqlite: foreign keys off
-- Tunnels of kind 'udp'. SQLite cannot change a CHECK constraint in
-- place: the table is rebuilt (SQLite's documented procedure, run with
-- foreign keys off so that dropping the old table deletes nothing through
-- ON DELETE CASCADE; the runner checks every reference before commit).
CREATE TABLE tunnels_new (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
	name TEXT NOT NULL,
	kind TEXT NOT NULL CHECK (kind IN ('http', 'tcp', 'udp')),
	local_port INTEGER NOT NULL,
	subdomain TEXT UNIQUE,
	public INTEGER NOT NULL DEFAULT 0,
	remote_port INTEGER NOT NULL UNIQUE REFERENCES ports(port),
	status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'online', 'offline')),
	created_at INTEGER NOT NULL,
	access TEXT NOT NULL DEFAULT 'public' CHECK (access IN ('public', 'operator', 'password')),
	access_password_hash TEXT NOT NULL DEFAULT '',
	allow_ips TEXT NOT NULL DEFAULT '',
	paused INTEGER NOT NULL DEFAULT 0,
	UNIQUE (machine_id, name)
);
INSERT INTO tunnels_new(id, machine_id, name, kind, local_port, subdomain, public, remote_port, status, created_at,
		access, access_password_hash, allow_ips, paused)
	SELECT id, machine_id, name, kind, local_port, subdomain, public, remote_port, status, created_at,
		access, access_password_hash, allow_ips, paused FROM tunnels;
-- AUTOINCREMENT never gives an id twice: the new table goes on from the
-- old one's highest id ever given, not from its highest id left.
DELETE FROM sqlite_sequence WHERE name = 'tunnels_new';
INSERT INTO sqlite_sequence(name, seq) SELECT 'tunnels_new', seq FROM sqlite_sequence WHERE name = 'tunnels';
DROP TABLE tunnels;
ALTER TABLE tunnels_new RENAME TO tunnels;
