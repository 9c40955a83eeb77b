-- Speed tests between an edge and a machine's agent, through the machine's
-- tunnel (issue 50): one row per test, kept 90 days (Store.PruneSpeedTests).
--   edge: the edge that ran it (its tunnel server carried the test);
--   phase: download, upload, rtt or mtu while it runs;
--   seconds: the budget of each direction;
--   download_kbps, upload_kbps: the steady rate (kbit/s), measured where
--     the bytes arrived; rtt_us: the median round trip (µs); mtu and
--     payload: the path MTU and the largest ICMP payload that passes
--     unfragmented. NULL: not measured (the test failed before).
-- A test runs until it has a finished_at: the partial unique index lets
-- one test run per machine, whichever edge starts it.
CREATE TABLE speedtests (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
	edge TEXT NOT NULL DEFAULT '',
	state TEXT NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'failed')),
	phase TEXT NOT NULL DEFAULT '',
	seconds INTEGER NOT NULL,
	started_at INTEGER NOT NULL,
	finished_at INTEGER,
	download_kbps INTEGER,
	upload_kbps INTEGER,
	rtt_us INTEGER,
	mtu INTEGER,
	payload INTEGER,
	error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX speedtests_machine ON speedtests(machine_id, started_at);
CREATE UNIQUE INDEX speedtests_running ON speedtests(machine_id) WHERE finished_at IS NULL;
