-- tunnel_version is the version of the tunnel server (frps) an edge runs,
-- as the edge last saw it answer ('' until then). A machine's client for
-- that edge asks for what both sides speak: in a cluster whose edges are
-- upgraded one at a time, an edge still on an older frps gets the older
-- wire protocol from an updated frpc.
ALTER TABLE edges ADD COLUMN tunnel_version TEXT NOT NULL DEFAULT '';
