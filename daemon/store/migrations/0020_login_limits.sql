-- Login hardening (issue 12).

-- A pending login counts its code attempts: it dies after a few wrong
-- codes. client_addr (already there) binds it to the address that got it.
ALTER TABLE login_pending ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;

-- Backup codes are found by a non-secret prefix, so a guess costs one hash.
-- Codes issued before this migration have no prefix (NULL) and are checked
-- the old way until the operator issues new ones.
ALTER TABLE backup_codes ADD COLUMN lookup TEXT;
CREATE INDEX backup_codes_lookup ON backup_codes(lookup);
