package api

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The access fields of an http tunnel: accepted values are shown back
// (never the password), and every bad value answers 400 with the reason and
// leaves the tunnel as it was.
func TestTunnelAccessFields(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		mid, _ := e.machine(t)
		create := func(body string) resp {
			return e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie, body: `{"machine_id":` + mid + `,` + body + `}`})
		}
		web := e.data(t, create(`"name":"web","kind":"http","local_port":80,"subdomain":"web"`), 201)
		if web["access"] != "public" || web["has_password"] != nil || web["allow_ips"] != nil {
			t.Fatalf("a new http tunnel: %v", web)
		}
		tcp := e.data(t, create(`"name":"db","kind":"tcp","local_port":5432`), 201)
		if _, ok := tcp["access"]; ok {
			t.Fatalf("a tcp tunnel shows access: %v", tcp)
		}
		path := "/api/tunnels/" + fmt.Sprint(web["id"])
		patch := func(body string) resp { return e.do(req{method: "PATCH", path: path, cookie: e.cookie, body: body}) }

		got := e.data(t, patch(`{"access":"password","password":"correct horse battery staple","allow_ips":[" 10.1.2.3/8","2001:db8::1","10.9.9.9/8"]}`), 200)
		if got["access"] != "password" || got["has_password"] != true || fmt.Sprint(got["allow_ips"]) != "[10.0.0.0/8 2001:db8::1/128]" {
			t.Fatalf("after PATCH: %v", got)
		}
		if strings.Contains(e.do(req{method: "GET", path: "/api/tunnels", cookie: e.cookie}).Body.String(), "argon2") {
			t.Fatal("the password hash is shown")
		}
		before := e.do(req{method: "GET", path: path, cookie: e.cookie}).Body.String()
		// A gate of mode sso cannot work while single sign-on is off.
		ssoOff := `access: "sso" needs single sign-on, which is not on here: set it up in Security → Single sign-on first`
		wantError(t, patch(`{"access":"sso","sso_allow":["ana@example.com"]}`), 400, ssoOff)
		wantError(t, create(`"name":"w3","kind":"http","local_port":80,"subdomain":"w3","access":"sso","sso_allow":["ana@example.com"]`), 400, ssoOff)
		e.ssoOn(t)
		// A misspelt field is refused by name, and changes nothing.
		wantError(t, patch(`{"acess":"operator"}`), 400, `unknown field "acess"`)
		wantError(t, create(`"name":"w4","kind":"http","local_port":80,"subdomain":"w4","acess":"operator"`), 400, `unknown field "acess"`)
		for _, c := range []struct{ body, msg string }{
			{`{"access":"everyone"}`, `access must be "public", "operator", "password" or "sso"`},
			{`{"access":"sso"}`, `sso_allow is required for access "sso": the emails, @domains or group:names that may enter`},
			{`{"access":"sso","sso_allow":["ana","@x","group:"]}`, `sso_allow: "ana", "@x", "group:": use an email, @domain or group:name`},
			{`{"access":"operator","password":"correct horse battery staple"}`, `password is only for access "password"`},
			{`{"password":"short"}`, "password must be at least 8 characters"},
			{`{"password":"password123"}`, "password is too easy to guess: use a longer passphrase of unrelated words"},
			{`{"allow_ips":["10.0.0.0/33"]}`, `allow_ips: "10.0.0.0/33" is not an address or CIDR`},
			{`{"allow_ips":["example.com"]}`, `allow_ips: "example.com" is not an address or CIDR`},
			{`{"allow_ips":["10.0.0.0/33","192.0.2.1"," 300.1.1.1 ","fe80::1%eth0/64"]}`, `allow_ips: "10.0.0.0/33", "300.1.1.1" and "fe80::1%eth0/64" are not addresses or CIDRs`},
			{`{"allow_ips":[` + strings.Repeat(`"10.0.0.1",`, 64) + `"10.0.0.2"]}`, "allow_ips may hold at most 64 entries"},
			{`{"allow_ips":"10.0.0.1"}`, "invalid request body"},
			{`{"access":"operator","name":"Bad Name"}`, "name must be a hostname label: lowercase letters, digits and inner hyphens"},
		} {
			wantError(t, patch(c.body), 400, c.msg)
			if now := e.do(req{method: "GET", path: path, cookie: e.cookie}).Body.String(); now != before {
				t.Fatalf("%s changed the tunnel:\n%s\n%s", c.body, before, now)
			}
		}
		// Password mode needs a password when switching to it.
		op := e.data(t, patch(`{"access":"operator","allow_ips":[]}`), 200)
		if op["access"] != "operator" || op["has_password"] != nil || op["allow_ips"] != nil {
			t.Fatalf("switched to operator: %v", op)
		}
		wantError(t, patch(`{"access":"password"}`), 400, `password is required for access "password"`)
		wantError(t, create(`"name":"w2","kind":"http","local_port":80,"subdomain":"w2","access":"password"`), 400, `password is required for access "password"`)
		dbPath := "/api/tunnels/" + fmt.Sprint(tcp["id"])
		for _, c := range []struct{ body, msg string }{
			{`{"access":"operator"}`, "access is only for http tunnels"},
			{`{"password":"correct horse battery staple"}`, "password is only for http tunnels"},
			{`{"allow_ips":["10.0.0.1"]}`, "allow_ips is only for http tunnels"},
		} {
			wantError(t, e.do(req{method: "PATCH", path: dbPath, cookie: e.cookie, body: c.body}), 400, c.msg)
		}
		if n := len(e.list(t, "/api/tunnels")); n != 2 {
			t.Fatalf("%d tunnels after refused creations, want 2", n)
		}
	})
}

// Without a dashboard session the authorize page issues nothing: it asks
// the visitor to sign in to the dashboard first.
func TestGateAuthorizeWithoutSession(t *testing.T) {
	e := newEnv(t)
	r := e.do(req{method: "GET", path: "/api/gate/authorize?host=x.example.com"})
	if r.Code != 200 || !strings.Contains(r.Body.String(), "<h1>Sign in first</h1>") || r.Header().Get("Set-Cookie") != "" ||
		strings.Contains(r.Body.String(), "code=") {
		t.Fatalf("%d %v\n%s", r.Code, r.Header(), r.Body)
	}
}

// TestTunnelSSOAccess: a tunnel in sso mode keeps its list of who may
// enter, cleaned (emails and domains in lower case, no duplicates), and
// loses it when it leaves sso mode.
func TestTunnelSSOAccess(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		mid, _ := e.machine(t)
		e.ssoOn(t)
		web := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
			body: `{"machine_id":` + mid + `,"name":"team","kind":"http","local_port":80,"subdomain":"team","access":"sso","sso_allow":["Ana@Example.com ","@Corp.example","group:ops","ana@example.com"]}`}), 201)
		if web["access"] != "sso" || fmt.Sprint(web["sso_allow"]) != "[ana@example.com @corp.example group:ops]" {
			t.Fatalf("created: %v", web)
		}
		path := "/api/tunnels/" + fmt.Sprint(web["id"])
		got := e.data(t, e.do(req{method: "PATCH", path: path, cookie: e.cookie, body: `{"access":"operator"}`}), 200)
		if got["access"] != "operator" || got["sso_allow"] != nil {
			t.Fatalf("after leaving sso: %v", got)
		}
		// The audit says who may enter an SSO gate, before and after.
		e.data(t, e.do(req{method: "PATCH", path: path, cookie: e.cookie, body: `{"access":"sso","sso_allow":["@corp.example"]}`}), 200)
		e.data(t, e.do(req{method: "PATCH", path: path, cookie: e.cookie, body: `{"sso_allow":["@corp.example","bo@example.com"]}`}), 200)
		want := []string{
			`tunnel "team" of machine "box" changed: access single sign-on (@corp.example) → single sign-on (@corp.example, bo@example.com)`,
			`tunnel "team" of machine "box" changed: access operators only → single sign-on (@corp.example)`,
			`tunnel "team" of machine "box" changed: access single sign-on (ana@example.com, @corp.example, group:ops) → operators only`,
		}
		if got := e.auditOf(t, "TUNNEL_UPDATED"); !slices.Equal(got, want) {
			t.Fatalf("audit:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
