-- Rate-limited attempts are aggregated: one row per kind, address and
-- minute (bucket = unix minute) carrying a count. Other rows have no bucket
-- and a count of 1.
ALTER TABLE audit_log ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
ALTER TABLE audit_log ADD COLUMN bucket INTEGER;
CREATE UNIQUE INDEX audit_log_aggregate ON audit_log(kind, client_addr, bucket) WHERE bucket IS NOT NULL;

-- Retention prunes activity by age.
CREATE INDEX activity_events_created ON activity_events(created_at);
