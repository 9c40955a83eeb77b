-- What is wrong with the certificate the web proxy served at a tunnel's
-- last probe, in words ('' when nothing is): none served, not trusted,
-- expired, or past its renewal time (the proxy's renewals are failing).
ALTER TABLE tunnel_probes ADD COLUMN cert_error TEXT NOT NULL DEFAULT '';
