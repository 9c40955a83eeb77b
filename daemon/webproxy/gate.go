package webproxy

// gateTmpl is a gated tunnel's site body. The gate's own pages (/.tunnelsvc/)
// go to the gate; everything else is checked by it first (forward_auth),
// in this order: a client's X-Forwarded-User and X-Forwarded-Email are
// dropped, the gate answers (a refusal or a login redirect goes back to the
// browser as it is), its Cookie header (the request's, without the gate's
// cookie) replaces the request's (and is dropped when nothing is left), in
// operator mode its X-Forwarded-User is added, and in sso mode its
// X-Forwarded-User and X-Forwarded-Email (who signed in). A bypass token
// never reaches the app: X-Tunnel-Token is dropped, and so is an
// Authorization header carrying one (gate.TokenPrefix); an app's own
// Authorization header is left alone.
const gateTmpl = `{{define "gate"}}handle /.tunnelsvc/* {
		reverse_proxy {{.V.Gate}}
	}
	handle {
		route {
			request_header -X-Forwarded-User
			request_header -X-Forwarded-Email
			forward_auth {{.V.Gate}} {
				uri /check
				copy_headers Cookie{{if eq (index .V.Gates .T.Subdomain) "operator"}} X-Forwarded-User{{end}}{{if eq (index .V.Gates .T.Subdomain) "sso"}} X-Forwarded-User X-Forwarded-Email{{end}}
			}
			@nocookie header_regexp Cookie ^$
			request_header @nocookie -Cookie
			request_header -X-Tunnel-Token
			@tunneltoken header_regexp Authorization "^Bearer +tsvcbt_"
			request_header @tunneltoken -Authorization
			{{.V.Proxy .T "\t\t\t"}}
		}
	}{{end}}`

type gateView struct {
	V view
	T HTTPTunnel
}

// GateMode is how a tunnel's site takes the gate's answer: GateCheck (the
// default) passes only the Cookie header on, GateOperator also the gate's
// X-Forwarded-User, GateSSO X-Forwarded-User and X-Forwarded-Email.
type GateMode string

const (
	GateCheck    GateMode = "check"
	GateOperator GateMode = "operator"
	GateSSO      GateMode = "sso"
)

// Gated reports whether the tunnel at sub goes through the gate: all do
// when there is one.
func (v view) Gated(sub string) bool { return v.Gate != "" }
