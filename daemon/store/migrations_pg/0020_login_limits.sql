-- PostgreSQL's form of migrations/0020_login_limits.sql (see there).
ALTER TABLE login_pending ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;

ALTER TABLE backup_codes ADD COLUMN lookup TEXT;
CREATE INDEX backup_codes_lookup ON backup_codes(lookup);
