-- PostgreSQL's form of migrations/0253_machine_versions.sql (see there).
ALTER TABLE machines ADD COLUMN agent_version TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN client_version TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN bundle_version TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN arch TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN agent_capabilities TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN versions_at BIGINT;
ALTER TABLE machines ADD COLUMN update_state TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN update_target TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN update_error TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN update_at BIGINT;
