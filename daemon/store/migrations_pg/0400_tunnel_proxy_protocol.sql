-- PostgreSQL's form of migrations/0400_tunnel_proxy_protocol.sql (see there).
ALTER TABLE tunnels ADD COLUMN proxy_protocol TEXT NOT NULL DEFAULT '' CHECK (proxy_protocol IN ('', 'v1', 'v2'));
