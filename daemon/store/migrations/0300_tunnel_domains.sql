-- An http tunnel's own domains, served besides <subdomain>.<domain>: each
-- name belongs to one tunnel at most.
CREATE TABLE tunnel_domains (
	domain TEXT PRIMARY KEY,
	tunnel_id INTEGER NOT NULL REFERENCES tunnels(id) ON DELETE CASCADE
);
CREATE INDEX tunnel_domains_tunnel ON tunnel_domains(tunnel_id);
