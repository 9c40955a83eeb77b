-- What the dashboard shows about machines, tokens and tunnels (issue 14).

-- Machine names are unique, ignoring ASCII case. Machines registered before
-- this rule that share a name keep the oldest one's name unchanged; the
-- others get their id appended, so the index can be built.
UPDATE machines SET name = name || ' (' || id || ')'
	WHERE EXISTS (SELECT 1 FROM machines o WHERE o.name = machines.name COLLATE NOCASE AND o.id < machines.id);
CREATE UNIQUE INDEX machines_name_unique ON machines(name COLLATE NOCASE);

-- The last attempt to deliver the client config to the machine's agent:
-- NULL ok means none was made yet.
ALTER TABLE machines ADD COLUMN config_push_ok INTEGER;
ALTER TABLE machines ADD COLUMN config_push_message TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN config_push_at INTEGER;

-- Which VPS key's public half the machine was given at registration. Not a
-- foreign key: deleting a key must not touch machines.
ALTER TABLE machines ADD COLUMN ssh_key_id TEXT;

-- The real per-key count, as announced in 0003.
DROP VIEW ssh_key_machine_counts;
CREATE VIEW ssh_key_machine_counts AS
	SELECT ssh_key_id, COUNT(*) AS machine_count FROM machines
	WHERE ssh_key_id IS NOT NULL GROUP BY ssh_key_id;

-- A label the operator gives a bootstrap token ("Bob's laptop").
ALTER TABLE bootstrap_tokens ADD COLUMN label TEXT NOT NULL DEFAULT '';

-- The last reachability probe of each http tunnel through the web proxy.
CREATE TABLE tunnel_probes (
	tunnel_id INTEGER PRIMARY KEY REFERENCES tunnels(id) ON DELETE CASCADE,
	state TEXT NOT NULL CHECK (state IN ('up', 'down')),
	http_status INTEGER NOT NULL DEFAULT 0,
	error TEXT NOT NULL DEFAULT '',
	cert_issuer TEXT NOT NULL DEFAULT '',
	cert_expires_at INTEGER,
	cert_valid INTEGER NOT NULL DEFAULT 0,
	checked_at INTEGER NOT NULL
);
