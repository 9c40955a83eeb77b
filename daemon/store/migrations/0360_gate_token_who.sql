-- Who a gate session or code signs in, for access gates of mode 'sso'
-- (issue 31): the edge that checks a session another edge made passes it
-- on to the app as the edge that made it does.
ALTER TABLE gate_tokens ADD COLUMN who_user TEXT NOT NULL DEFAULT '';
ALTER TABLE gate_tokens ADD COLUMN who_email TEXT NOT NULL DEFAULT '';
