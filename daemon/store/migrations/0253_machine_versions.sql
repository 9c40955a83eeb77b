-- What each machine's agent last reported about the machine bundle it runs
-- (issue 26), so the dashboard shows who is outdated without asking every
-- agent at every refresh; versions_at is when (NULL: never), and the
-- background pass asks again when it is old. agent_capabilities is the
-- agent's space-separated list: an agent without "update" cannot take one.
ALTER TABLE machines ADD COLUMN agent_version TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN client_version TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN bundle_version TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN arch TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN agent_capabilities TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN versions_at INTEGER;
-- The machine's last update: updating, current, failed, rolled_back or
-- unsupported ('' when none ran), the version it went to, why it failed in
-- words, and when that state was reached.
ALTER TABLE machines ADD COLUMN update_state TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN update_target TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN update_error TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN update_at INTEGER;
