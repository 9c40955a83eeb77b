package auth

import (
	"net/http"
	"strings"
)

// Bearer is the credential of h's `Authorization: Bearer <credential>`
// ("" when there is none). The scheme's name is case-insensitive (RFC 9110
// §11.1): bearer and BEARER are Bearer. Every bearer credential the daemon
// takes (API tokens, agent tokens, the metrics token) is read here.
func Bearer(h http.Header) string {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(h.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(cred)
}
