-- PostgreSQL's form of migrations/0021_audit_aggregate.sql (see there).
ALTER TABLE audit_log ADD COLUMN count BIGINT NOT NULL DEFAULT 1;
ALTER TABLE audit_log ADD COLUMN bucket BIGINT;
CREATE UNIQUE INDEX audit_log_aggregate ON audit_log(kind, client_addr, bucket) WHERE bucket IS NOT NULL;

CREATE INDEX activity_events_created ON activity_events(created_at);
