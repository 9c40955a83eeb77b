-- Machines with one tunnel client per edge (issue 28). tunnel_port is the
-- port each edge's tunnel server listens on (its heartbeat records it), so
-- that any edge can render a machine's client config for every other.
ALTER TABLE edges ADD COLUMN tunnel_port INTEGER NOT NULL DEFAULT 0;
-- home_edge is the name of the edge a machine joined through: its client
-- for that edge is the machine's main one (revtunnel-client.service), the
-- others are revtunnel-client@<edge>.service. '' for a machine that joined
-- before edges, or when that edge is gone: then the oldest edge is home.
ALTER TABLE machines ADD COLUMN home_edge TEXT NOT NULL DEFAULT '';
