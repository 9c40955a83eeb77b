-- PostgreSQL's form of migrations/0121_agent_outdated.sql (see there).
ALTER TABLE machines ADD COLUMN agent_outdated BIGINT NOT NULL DEFAULT 0;
