-- Access gates of mode 'sso' (see the SQLite migration).
ALTER TABLE tunnels DROP CONSTRAINT tunnels_access_check;
ALTER TABLE tunnels ADD CONSTRAINT tunnels_access_check CHECK (access IN ('public', 'operator', 'password', 'sso'));
ALTER TABLE tunnels ADD COLUMN sso_allow TEXT NOT NULL DEFAULT '';
