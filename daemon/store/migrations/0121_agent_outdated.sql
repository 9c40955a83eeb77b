-- The machine's agent, when the daemon last reached it, predated signed
-- requests (it knows only the agent token as a Bearer header). The dashboard
-- tells the operator to run bootstrap.sh on the machine again.
ALTER TABLE machines ADD COLUMN agent_outdated INTEGER NOT NULL DEFAULT 0;
