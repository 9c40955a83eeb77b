-- sqlite: foreign keys off
-- Access gates of mode 'sso' (issue 31): the visitor signs in through the
-- OpenID provider, and sso_allow lists who may enter this tunnel (emails,
-- @domains, group:names, separated by commas). SQLite cannot change the
-- access CHECK in place: the table is rebuilt as in 0280.
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
	access TEXT NOT NULL DEFAULT 'public' CHECK (access IN ('public', 'operator', 'password', 'sso')),
	access_password_hash TEXT NOT NULL DEFAULT '',
	allow_ips TEXT NOT NULL DEFAULT '',
	paused INTEGER NOT NULL DEFAULT 0,
	balance TEXT NOT NULL DEFAULT 'failover' CHECK (balance IN ('failover', 'round_robin')),
	health_path TEXT NOT NULL DEFAULT '',
	health_interval_s INTEGER NOT NULL DEFAULT 0,
	health_expect_status INTEGER NOT NULL DEFAULT 0,
	sso_allow TEXT NOT NULL DEFAULT '',
	UNIQUE (machine_id, name)
);
INSERT INTO tunnels_new(id, machine_id, name, kind, local_port, subdomain, public, remote_port, status, created_at,
		access, access_password_hash, allow_ips, paused, balance, health_path, health_interval_s, health_expect_status)
	SELECT id, machine_id, name, kind, local_port, subdomain, public, remote_port, status, created_at,
		access, access_password_hash, allow_ips, paused, balance, health_path, health_interval_s, health_expect_status FROM tunnels;
DELETE FROM sqlite_sequence WHERE name = 'tunnels_new';
INSERT INTO sqlite_sequence(name, seq) SELECT 'tunnels_new', seq FROM sqlite_sequence WHERE name = 'tunnels';
DROP TABLE tunnels;
ALTER TABLE tunnels_new RENAME TO tunnels;
