-- PostgreSQL's form of migrations/0070_dashboard_state.sql (see there).
-- SQLite's NOCASE folds ASCII letters only; lower() folds every letter
-- the database's encoding knows, so a name differing from another only in
-- the case of a non-ASCII letter is refused here and not on SQLite.
UPDATE machines SET name = name || ' (' || id || ')'
	WHERE EXISTS (SELECT 1 FROM machines o WHERE lower(o.name) = lower(machines.name) AND o.id < machines.id);
CREATE UNIQUE INDEX machines_name_unique ON machines(lower(name));

ALTER TABLE machines ADD COLUMN config_push_ok BIGINT;
ALTER TABLE machines ADD COLUMN config_push_message TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN config_push_at BIGINT;

ALTER TABLE machines ADD COLUMN ssh_key_id TEXT;

DROP VIEW ssh_key_machine_counts;
CREATE VIEW ssh_key_machine_counts AS
	SELECT ssh_key_id, COUNT(*) AS machine_count FROM machines
	WHERE ssh_key_id IS NOT NULL GROUP BY ssh_key_id;

ALTER TABLE bootstrap_tokens ADD COLUMN label TEXT NOT NULL DEFAULT '';

CREATE TABLE tunnel_probes (
	tunnel_id BIGINT PRIMARY KEY REFERENCES tunnels(id) ON DELETE CASCADE,
	state TEXT NOT NULL CHECK (state IN ('up', 'down')),
	http_status BIGINT NOT NULL DEFAULT 0,
	error TEXT NOT NULL DEFAULT '',
	cert_issuer TEXT NOT NULL DEFAULT '',
	cert_expires_at BIGINT,
	cert_valid BIGINT NOT NULL DEFAULT 0,
	checked_at BIGINT NOT NULL
);
