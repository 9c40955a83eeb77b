package api

import (
	"net"
	"net/http"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
)

// SessionCookie is the session cookie's name (spec §5.2).
const SessionCookie = "tunnel_session"

// secureRequest reports whether the cookie must be Secure: the request came
// over TLS, or the proxy in front says it did.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, token string) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: token, Path: "/",
		MaxAge: int(auth.SessionTTL.Seconds()), HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: secureRequest(r),
	})
}

// clearSessionCookie is spec §5.3: empty value, Path=/, Max-Age=-1,
// HttpOnly, SameSite=Lax. It is written by hand because net/http renders any
// negative MaxAge as Max-Age=0; browsers treat both as "delete now".
func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	v := SessionCookie + "=; Path=/; Max-Age=-1; HttpOnly; SameSite=Lax"
	if secureRequest(r) {
		v += "; Secure"
	}
	w.Header().Add("Set-Cookie", v)
}

func netSplitHostPort(hp string) (string, string, error) { return net.SplitHostPort(hp) }

func trimBrackets(h string) string { return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]") }

// ssoCookie binds a single sign-on flow to the browser that started it:
// set at /api/auth/sso/start, read and cleared at the callback.
const ssoCookie = "tunnel_sso"

// ssoCookiePath limits it to the flow's two routes.
const ssoCookiePath = "/api/auth/sso/"

func setSSOCookie(w http.ResponseWriter, r *http.Request, binding string, ttl int) {
	http.SetCookie(w, &http.Cookie{
		Name: ssoCookie, Value: binding, Path: ssoCookiePath, MaxAge: ttl,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secureRequest(r),
	})
}

func clearSSOCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: ssoCookie, Value: "", Path: ssoCookiePath, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secureRequest(r),
	})
}
