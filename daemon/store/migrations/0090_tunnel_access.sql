-- Access gates of HTTP tunnels (issue 16). access: who may reach the site
-- (public, operator, password); access_password_hash: the argon2id hash of
-- the shared password in password mode, else empty; allow_ips: the client
-- addresses and CIDRs let through, comma-separated and normalised, empty
-- meaning any address.
ALTER TABLE tunnels ADD COLUMN access TEXT NOT NULL DEFAULT 'public' CHECK (access IN ('public', 'operator', 'password'));
ALTER TABLE tunnels ADD COLUMN access_password_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE tunnels ADD COLUMN allow_ips TEXT NOT NULL DEFAULT '';
