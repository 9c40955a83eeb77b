-- An http tunnel's own domains (see the SQLite migration).
CREATE TABLE tunnel_domains (
	domain TEXT PRIMARY KEY,
	tunnel_id BIGINT NOT NULL REFERENCES tunnels(id) ON DELETE CASCADE
);
CREATE INDEX tunnel_domains_tunnel ON tunnel_domains(tunnel_id);
