-- Fleet updates as jobs in the database (issue 45): every edge shows the
-- same rollout, and another edge resumes it when the one running it dies.
-- A lease's fence grows by one each time the lease changes hands; the
-- rollout keeps the fence of the edge that runs it, and a write that
-- brings an older fence (an edge that was stopped and woke up after its
-- lease moved) changes nothing.
ALTER TABLE leases ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;

CREATE TABLE rollouts (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	target TEXT NOT NULL,
	base_url TEXT NOT NULL,
	batch INTEGER NOT NULL,
	machine_ids TEXT NOT NULL,
	updated TEXT NOT NULL DEFAULT '[]',
	failed TEXT NOT NULL DEFAULT '',
	started INTEGER NOT NULL DEFAULT 0,
	lines TEXT NOT NULL DEFAULT '[]',
	state TEXT NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'failed')),
	edge TEXT NOT NULL DEFAULT '',
	fence INTEGER NOT NULL DEFAULT 0,
	started_at INTEGER NOT NULL,
	finished_at INTEGER
);
CREATE INDEX rollouts_state ON rollouts(state);
