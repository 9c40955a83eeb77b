-- PostgreSQL's form of migrations/0090_tunnel_access.sql (see there).
ALTER TABLE tunnels ADD COLUMN access TEXT NOT NULL DEFAULT 'public' CHECK (access IN ('public', 'operator', 'password'));
ALTER TABLE tunnels ADD COLUMN access_password_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE tunnels ADD COLUMN allow_ips TEXT NOT NULL DEFAULT '';
