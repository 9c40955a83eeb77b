-- PostgreSQL's form of migrations/0390_edge_tunnel_version.sql (see there).
ALTER TABLE edges ADD COLUMN tunnel_version TEXT NOT NULL DEFAULT '';
