-- What each edge found of the parts of its own host (see the SQLite
-- migration).
CREATE TABLE host_parts (
	edge TEXT NOT NULL,
	part TEXT NOT NULL,
	label TEXT NOT NULL,
	in_use INTEGER NOT NULL DEFAULT 0,
	desired_hash TEXT NOT NULL DEFAULT '',
	applied_hash TEXT NOT NULL DEFAULT '',
	generation BIGINT NOT NULL DEFAULT 0,
	pending_since BIGINT,
	error TEXT NOT NULL DEFAULT '',
	checked_at BIGINT NOT NULL,
	PRIMARY KEY (edge, part)
);
