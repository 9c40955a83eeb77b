-- PostgreSQL's form of migrations/0130_config_generation.sql (see there).
ALTER TABLE machines ADD COLUMN config_desired_gen BIGINT NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN config_desired_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN config_applied_gen BIGINT NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN config_pending_since BIGINT;
ALTER TABLE machines ADD COLUMN config_applied_server TEXT NOT NULL DEFAULT '';
