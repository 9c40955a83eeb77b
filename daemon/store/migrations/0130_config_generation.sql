-- Desired and applied client-config generations of each machine. The daemon
-- raises config_desired_gen whenever the config it would render for the
-- machine changes (config_desired_hash is that config's digest); the agent
-- reports the generation it applied. Until both match, the daemon keeps
-- delivering with backoff. config_pending_since is when the machine fell
-- behind (NULL while in step); config_applied_server is the tunnel server
-- address of the applied config (frpc's reload does not apply a new one: it
-- must restart).
ALTER TABLE machines ADD COLUMN config_desired_gen INTEGER NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN config_desired_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN config_applied_gen INTEGER NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN config_pending_since INTEGER;
ALTER TABLE machines ADD COLUMN config_applied_server TEXT NOT NULL DEFAULT '';
