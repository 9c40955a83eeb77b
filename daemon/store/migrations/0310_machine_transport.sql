-- How a machine's tunnel client reaches the tunnel server (issue 30):
-- 'tcp' straight to its port, or 'wss' through the web proxy on 443, for
-- machines whose network lets only 443 out. transport is what the daemon
-- renders (the machine's join chose it); transport_seen is how the machine
-- last logged in, as the tunnel server saw it ('' before its first login),
-- and transport_addr the address it came from then.
ALTER TABLE machines ADD COLUMN transport TEXT NOT NULL DEFAULT 'tcp' CHECK (transport IN ('tcp', 'wss'));
ALTER TABLE machines ADD COLUMN transport_seen TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN transport_addr TEXT NOT NULL DEFAULT '';
