-- PostgreSQL's form of migrations/0252_probe_cert_error.sql (see there).
ALTER TABLE tunnel_probes ADD COLUMN cert_error TEXT NOT NULL DEFAULT '';
