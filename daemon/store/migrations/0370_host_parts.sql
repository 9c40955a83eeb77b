-- What each edge found of the parts of its own host it renders and
-- applies (issue 45): the tunnel server's config, the Caddyfile, the nft
-- publish table, the firewall ruleset. desired_hash is the configuration
-- rendered now, applied_hash the one last applied; a failed apply keeps
-- the previous configuration, and says since when and why.
CREATE TABLE host_parts (
	edge TEXT NOT NULL,
	part TEXT NOT NULL,
	label TEXT NOT NULL,
	in_use INTEGER NOT NULL DEFAULT 0,
	desired_hash TEXT NOT NULL DEFAULT '',
	applied_hash TEXT NOT NULL DEFAULT '',
	generation INTEGER NOT NULL DEFAULT 0,
	pending_since INTEGER,
	error TEXT NOT NULL DEFAULT '',
	checked_at INTEGER NOT NULL,
	PRIMARY KEY (edge, part)
);
