-- Machines, their one-time bootstrap tokens, their tunnels, the ports they
-- hold, and the activity feed (spec §4.2 activity, §4.5, §6).

-- One-time bootstrap tokens. Only the SHA-256 of the token is kept. A token
-- is claimed by the single UPDATE that sets used_at where it is still NULL,
-- so of two concurrent claims exactly one changes a row.
CREATE TABLE bootstrap_tokens (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	token_hash TEXT NOT NULL UNIQUE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_at INTEGER,
	machine_id INTEGER
);
CREATE INDEX bootstrap_tokens_pending ON bootstrap_tokens(used_at, expires_at);

-- Machines. secret_hash is looked up by the frp server plugin at every
-- operation; secret_sealed lets the daemon render the client config again.
-- agent_token_hash authenticates the machine's agent (self-delete).
CREATE TABLE machines (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	name TEXT NOT NULL,
	username TEXT NOT NULL,
	status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'online', 'offline')),
	created_at INTEGER NOT NULL,
	last_seen INTEGER,
	client_addr TEXT NOT NULL DEFAULT '',
	secret_hash TEXT NOT NULL UNIQUE,
	secret_sealed TEXT NOT NULL,
	agent_token_hash TEXT NOT NULL UNIQUE,
	tunnel_port INTEGER NOT NULL,
	agent_port INTEGER NOT NULL,
	agent_local_port INTEGER NOT NULL,
	ssh_local_port INTEGER NOT NULL DEFAULT 22
);

-- The port ledger: every remote port frps may bind for a machine (its SSH
-- tunnel, its agent, each tcp or http tunnel). The primary key makes handing
-- one port out twice impossible, whatever the allocator does.
CREATE TABLE ports (
	port INTEGER PRIMARY KEY,
	machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
	purpose TEXT NOT NULL CHECK (purpose IN ('ssh', 'agent', 'tunnel'))
);
CREATE INDEX ports_machine ON ports(machine_id);

CREATE TABLE tunnels (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
	name TEXT NOT NULL,
	kind TEXT NOT NULL CHECK (kind IN ('http', 'tcp')),
	local_port INTEGER NOT NULL,
	subdomain TEXT UNIQUE,
	public INTEGER NOT NULL DEFAULT 0,
	remote_port INTEGER NOT NULL UNIQUE REFERENCES ports(port),
	status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'online', 'offline')),
	created_at INTEGER NOT NULL,
	UNIQUE (machine_id, name)
);

-- Failed POST /api/bootstrap attempts (GET /api/security/stale-tokens).
CREATE TABLE stale_token_attempts (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	created_at INTEGER NOT NULL,
	client_addr TEXT NOT NULL DEFAULT '',
	reason TEXT NOT NULL
);
CREATE INDEX stale_token_attempts_created ON stale_token_attempts(created_at DESC, id DESC);

-- Machine and tunnel activity. machine_id and tunnel_id are kept as plain
-- numbers, not foreign keys, so the history outlives what it talks about.
CREATE TABLE activity_events (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	created_at INTEGER NOT NULL,
	source TEXT NOT NULL CHECK (source IN ('machine', 'tunnel')),
	kind TEXT NOT NULL,
	machine_id INTEGER,
	tunnel_id INTEGER,
	message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX activity_events_source ON activity_events(source, created_at DESC, id DESC);
