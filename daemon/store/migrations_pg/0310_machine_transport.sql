-- How a machine's tunnel client reaches the tunnel server (see the SQLite
-- migration).
ALTER TABLE machines ADD COLUMN transport TEXT NOT NULL DEFAULT 'tcp' CHECK (transport IN ('tcp', 'wss'));
ALTER TABLE machines ADD COLUMN transport_seen TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN transport_addr TEXT NOT NULL DEFAULT '';
