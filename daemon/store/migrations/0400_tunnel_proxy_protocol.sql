-- proxy_protocol: the PROXY protocol header a tunnel's service receives
-- before each connection's bytes, with the visitor's address ('' none,
-- 'v1' text, 'v2' binary; udp tunnels take only 'v2'). tcp and udp
-- tunnels get it from the machine's tunnel client; an http tunnel's from
-- the edge, which knows the visitor the web proxy saw.
ALTER TABLE tunnels ADD COLUMN proxy_protocol TEXT NOT NULL DEFAULT '' CHECK (proxy_protocol IN ('', 'v1', 'v2'));
