-- A paused tunnel keeps its row, port and settings but is closed: left out
-- of its machine's client config and of the Caddyfile, and refused by the
-- frps plugin, until it is resumed.
ALTER TABLE tunnels ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
