-- Sign-ins through the OpenID provider under way (issue 31): the state
-- sent to the provider (only its hash kept), the nonce the ID token must
-- carry, the PKCE verifier, what the sign-in is for and where it returns.
-- Kept here, not in memory, so that the callback may reach another edge.
CREATE TABLE oidc_flows (
	state_hash TEXT PRIMARY KEY,
	nonce TEXT NOT NULL,
	verifier TEXT NOT NULL,
	purpose TEXT NOT NULL,
	return_to TEXT NOT NULL DEFAULT '',
	expires_at INTEGER NOT NULL
);
