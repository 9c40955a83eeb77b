-- One http tunnel served by several machines: its own machine (the
-- tunnel's machine_id, local_port and remote_port) first, then the rows of
-- tunnel_targets, each with a remote port of its own held by its machine.
-- balance picks among them; the health_ columns configure the web proxy's
-- active health checks (health_path '' = none).
ALTER TABLE tunnels ADD COLUMN balance TEXT NOT NULL DEFAULT 'failover' CHECK (balance IN ('failover', 'round_robin'));
ALTER TABLE tunnels ADD COLUMN health_path TEXT NOT NULL DEFAULT '';
ALTER TABLE tunnels ADD COLUMN health_interval_s INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tunnels ADD COLUMN health_expect_status INTEGER NOT NULL DEFAULT 0;
CREATE TABLE tunnel_targets (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	tunnel_id INTEGER NOT NULL REFERENCES tunnels(id) ON DELETE CASCADE,
	machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
	local_port INTEGER NOT NULL,
	remote_port INTEGER NOT NULL UNIQUE REFERENCES ports(port),
	position INTEGER NOT NULL,
	status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'online', 'offline')),
	UNIQUE (tunnel_id, machine_id, local_port)
);
CREATE INDEX tunnel_targets_machine ON tunnel_targets(machine_id);
