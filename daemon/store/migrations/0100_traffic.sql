-- Tunnel traffic as the collector reads it from frps's dashboard API
-- (package monitor). Proxy names are frps's ("m7.ssh", "m7.tunnel-3");
-- machine_id and tunnel_id are plain numbers, not foreign keys, so the
-- history outlives what it talks about until it is pruned.

-- One row per proxy and minute (unix time / 60): the bytes carried during
-- that minute and the connections open at its last poll. Kept 7 days.
CREATE TABLE traffic_samples (
	proxy TEXT NOT NULL,
	minute INTEGER NOT NULL,
	machine_id INTEGER NOT NULL,
	tunnel_id INTEGER NOT NULL DEFAULT 0,
	bytes_in INTEGER NOT NULL DEFAULT 0,
	bytes_out INTEGER NOT NULL DEFAULT 0,
	conns INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (proxy, minute)
);
CREATE INDEX traffic_samples_minute ON traffic_samples(minute);

-- Monotonic totals per proxy, and the last per-day figures frps reported,
-- which the next poll subtracts (frps's counters restart at midnight and
-- when frps restarts). They survive daemon restarts.
CREATE TABLE traffic_totals (
	proxy TEXT PRIMARY KEY,
	machine_id INTEGER NOT NULL,
	tunnel_id INTEGER NOT NULL DEFAULT 0,
	seen_in INTEGER NOT NULL DEFAULT 0,
	seen_out INTEGER NOT NULL DEFAULT 0,
	seen_day TEXT NOT NULL DEFAULT '',
	total_in INTEGER NOT NULL DEFAULT 0,
	total_out INTEGER NOT NULL DEFAULT 0,
	conns INTEGER NOT NULL DEFAULT 0
);
