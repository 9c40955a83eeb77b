-- Apps past an http tunnel's gate (issue 49):
--   access_rules: JSON list of {"path", "action"}, first match wins:
--     "allow" skips the gate, "gate" asks it, "deny" refuses ('' none);
--   remember_days: a password or sso gate's session lasts this many days
--     (0: a day, as before), at most 90;
--   fallback_message: see below;
--   gate_epoch: grows when the operator ends the tunnel's visitor
--     sessions, so that every edge ends the ones it holds in memory;
--   tunnel_bypass_tokens: secrets an app sends instead of a cookie
--     (Authorization: Bearer, or X-Tunnel-Token), kept as SHA-256 hashes.
ALTER TABLE tunnels ADD COLUMN access_rules TEXT NOT NULL DEFAULT '';
ALTER TABLE tunnels ADD COLUMN remember_days INTEGER NOT NULL DEFAULT 0 CHECK (remember_days BETWEEN 0 AND 90);
ALTER TABLE tunnels ADD COLUMN gate_epoch INTEGER NOT NULL DEFAULT 0;
-- fallback_message: what the edge answers (503, on the site's own name)
-- while every machine of an http tunnel is down ('' none: Caddy's 502).
ALTER TABLE tunnels ADD COLUMN fallback_message TEXT NOT NULL DEFAULT '';

CREATE TABLE tunnel_bypass_tokens (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	tunnel_id INTEGER NOT NULL REFERENCES tunnels(id) ON DELETE CASCADE,
	name TEXT NOT NULL,
	token_hash TEXT NOT NULL UNIQUE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	UNIQUE (tunnel_id, name)
);
