-- Tunnels of kind 'udp'.
ALTER TABLE tunnels DROP CONSTRAINT tunnels_kind_check;
ALTER TABLE tunnels ADD CONSTRAINT tunnels_kind_check CHECK (kind IN ('http', 'tcp', 'udp'));
