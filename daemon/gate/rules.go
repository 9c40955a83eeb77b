package gate

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Actions of a path rule.
const (
	RuleAllow = "allow" // let through without the gate
	RuleGate  = "gate"  // ask the gate, as without rules
	RuleDeny  = "deny"  // refuse
)

// MaxRules bounds a tunnel's path rules.
const MaxRules = 32

// ParseRules checks a tunnel's path rules: each path starts with "/", is
// at most 200 characters of visible ASCII, and may end with one "*" (a
// prefix); each action is allow, gate or deny. The first error names the
// rule by its place ("rules[2]").
func ParseRules(rules []store.AccessRule) ([]store.AccessRule, error) {
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("at most %d rules", MaxRules)
	}
	out := make([]store.AccessRule, 0, len(rules))
	for i, r := range rules {
		p := strings.TrimSpace(r.Path)
		if p == "" || p[0] != '/' || len(p) > 200 || strings.Contains(strings.TrimSuffix(p, "*"), "*") {
			return nil, fmt.Errorf(`rules[%d].path must start with / and may end with one * (at most 200 characters)`, i)
		}
		for j := 0; j < len(p); j++ {
			if c := p[j]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == '"' || c == '\\' || c == '#' {
				return nil, fmt.Errorf("rules[%d].path holds %q: use a URL path, %%-encoded", i, string(c))
			}
		}
		switch r.Action {
		case RuleAllow, RuleGate, RuleDeny:
		default:
			return nil, fmt.Errorf(`rules[%d].action must be "allow", "gate" or "deny"`, i)
		}
		out = append(out, store.AccessRule{Path: p, Action: r.Action})
	}
	return out, nil
}

// ruleFor is the action of the first rule whose path matches path, or
// RuleGate when none does. A rule's path matches the same path, or, when
// it ends with "*", every path that starts with what comes before.
func ruleFor(rules []store.AccessRule, path string) string {
	for _, r := range rules {
		if prefix, ok := strings.CutSuffix(r.Path, "*"); ok {
			if strings.HasPrefix(path, prefix) {
				return r.Action
			}
		} else if path == r.Path {
			return r.Action
		}
	}
	return RuleGate
}

// actionFor is what the rules say of the path the visitor asked for
// (forward_auth's X-Forwarded-Uri, %-decoded as the app reads it). The
// path is matched as sent and with its dot segments and double slashes
// resolved ("/public/../admin" is also "/admin"): deny when either is
// denied, allow only when both are allowed. A URI that cannot be read is
// denied when any rule denies, else asked of the gate.
func actionFor(rules []store.AccessRule, r *http.Request) string {
	if len(rules) == 0 {
		return RuleGate
	}
	u, err := url.ParseRequestURI(r.Header.Get("X-Forwarded-Uri"))
	if err != nil || u.Path == "" {
		for _, rule := range rules {
			if rule.Action == RuleDeny {
				return RuleDeny
			}
		}
		return RuleGate
	}
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	asSent, resolved := ruleFor(rules, u.Path), ruleFor(rules, clean)
	switch {
	case asSent == RuleDeny || resolved == RuleDeny:
		return RuleDeny
	case asSent == RuleAllow && resolved == RuleAllow:
		return RuleAllow
	}
	return RuleGate
}

// TokenPrefix starts every bypass token, so that the web proxy removes an
// Authorization header carrying one, and leaves an app's own alone.
const TokenPrefix = "tsvcbt_"

// TokenHeader is the other header an app may send a bypass token in.
const TokenHeader = "X-Tunnel-Token"

// bypassToken is the bypass token the request carries, if any: in
// TokenHeader, or as "Authorization: Bearer tsvcbt_…".
func bypassToken(r *http.Request) (string, bool) {
	if v := strings.TrimSpace(r.Header.Get(TokenHeader)); v != "" {
		return v, true
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if v = strings.TrimSpace(v); strings.HasPrefix(v, TokenPrefix) {
			return v, true
		}
	}
	return "", false
}
