-- Edges (issue 28): the VPSes of one cluster, which share this database.
-- Every daemon keeps its own row up to date (address, version, last_seen
-- as a heartbeat); a row whose heartbeat is old is an edge that is down.
-- retiring_at is set when the operator retires an edge: every machine
-- drops it from its set, then the row is deleted.
CREATE TABLE edges (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	name TEXT NOT NULL UNIQUE,
	address TEXT NOT NULL DEFAULT '',
	version TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	last_seen INTEGER,
	retiring_at INTEGER
);

-- One-time tokens for `tunnelsvc edge join`; only the SHA-256 is kept,
-- claimed by the single UPDATE that sets used_at where it is still NULL.
CREATE TABLE edge_tokens (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	token_hash TEXT NOT NULL UNIQUE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_at INTEGER,
	edge_name TEXT NOT NULL DEFAULT ''
);

-- Which edges have each machine connected, as each edge's frps plugin
-- saw it. A machine is online when one edge that is up has it online.
CREATE TABLE machine_edges (
	machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
	edge_id INTEGER NOT NULL REFERENCES edges(id) ON DELETE CASCADE,
	status TEXT NOT NULL DEFAULT 'offline' CHECK (status IN ('online', 'offline')),
	last_seen INTEGER,
	PRIMARY KEY (machine_id, edge_id)
);

-- Leases for the jobs that must run once in a cluster (notifications,
-- retention): the holder renews before expires_at; another edge takes
-- the lease only once it has expired.
CREATE TABLE leases (
	name TEXT PRIMARY KEY,
	holder TEXT NOT NULL,
	expires_at INTEGER NOT NULL
);

-- Access-gate sessions and sign-in codes, so that one made through any
-- edge is honoured by every edge (each keeps them in memory too, and
-- checks from memory while the database is away). Only SHA-256 of the
-- cookie or code is kept. kind is 'session' or 'code'.
CREATE TABLE gate_tokens (
	token_hash TEXT PRIMARY KEY,
	kind TEXT NOT NULL CHECK (kind IN ('session', 'code')),
	tunnel_id INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE INDEX gate_tokens_expires ON gate_tokens(expires_at);

-- Failed authentications, for the login limits to count across the
-- cluster: each edge writes its own and reads the others'. key is the
-- limiter's key (an address or an IPv6 /64).
CREATE TABLE auth_failures (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	edge TEXT NOT NULL,
	key TEXT NOT NULL,
	at INTEGER NOT NULL
);
CREATE INDEX auth_failures_at ON auth_failures(at);
CREATE INDEX auth_failures_key ON auth_failures(key, at);

-- Which edge saw an activity event ('' before edges, or on a single box).
ALTER TABLE activity_events ADD COLUMN edge TEXT NOT NULL DEFAULT '';
