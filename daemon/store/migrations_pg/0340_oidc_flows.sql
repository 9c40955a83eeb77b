-- Sign-ins through the OpenID provider under way (see the SQLite migration).
CREATE TABLE oidc_flows (
	state_hash TEXT PRIMARY KEY,
	nonce TEXT NOT NULL,
	verifier TEXT NOT NULL,
	purpose TEXT NOT NULL,
	return_to TEXT NOT NULL DEFAULT '',
	expires_at BIGINT NOT NULL
);
