package api

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
)

// fuzzing reports whether this test binary runs with -test.fuzz (a search
// for new inputs) rather than replaying the seeds and the corpus.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// bootstrapTokenPlaceholder in a fuzzed body stands for the one live
// bootstrap token, so the fuzzer reaches past the token check (the names,
// the username) without having to guess a secret, and a crasher it
// writes replays in a later run.
const bootstrapTokenPlaceholder = "@TOKEN@"

// fuzzBootstrapRig is the state FuzzBootstrapRequest keeps between inputs:
// one live bootstrap token, and no machine.
type fuzzBootstrapRig struct {
	*machinesEnv
	tokenID int64
	token   string
	n       uint32
}

// mint makes the next live token.
func (g *fuzzBootstrapRig) mint(t testing.TB) {
	t.Helper()
	r := g.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: g.cookie})
	var out struct {
		Data struct {
			ID    int64  `json:"id"`
			Token string `json:"token"`
		} `json:"data"`
	}
	if r.Code != 200 || json.Unmarshal(r.Body.Bytes(), &out) != nil || out.Data.Token == "" {
		t.Fatalf("POST /api/bootstrap/tokens: %d %s", r.Code, r.Body)
	}
	g.tokenID, g.token = out.Data.ID, out.Data.Token
}

// peer is a client address of its own for each call: /api/bootstrap
// counts failures per address (an IPv6 /64), and a fuzzer's run of bad
// tokens would otherwise turn every later answer into a 429.
func (g *fuzzBootstrapRig) peer() string {
	g.n++
	return fmt.Sprintf("[2001:db8:%x:%x::1]:5000", g.n>>16, g.n&0xffff)
}

// listMachines lists the machines as the dashboard sees them.
func (g *fuzzBootstrapRig) listMachines(t testing.TB) []listedMachine {
	t.Helper()
	r := g.do(req{method: "GET", path: "/api/machines", cookie: g.cookie})
	var out struct {
		Data []listedMachine `json:"data"`
	}
	if r.Code != 200 || json.Unmarshal(r.Body.Bytes(), &out) != nil {
		t.Fatalf("GET /api/machines: %d %s", r.Code, r.Body)
	}
	return out.Data
}

// listedMachine is what FuzzBootstrapRequest reads of a listed machine.
type listedMachine struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// tokenState is the live token's state as the dashboard follows a join
// (pending, used, expired).
func (g *fuzzBootstrapRig) tokenState(t testing.TB) string {
	t.Helper()
	r := g.do(req{method: "GET", path: fmt.Sprintf("/api/bootstrap/tokens/%d", g.tokenID), cookie: g.cookie})
	var out struct {
		Data struct {
			State string `json:"state"`
		} `json:"data"`
	}
	if r.Code != 200 || json.Unmarshal(r.Body.Bytes(), &out) != nil {
		t.Fatalf("GET /api/bootstrap/tokens/%d: %d %s", g.tokenID, r.Code, r.Body)
	}
	return out.Data.State
}

// registered checks what follows a successful bootstrap: exactly one new
// machine, named as the body said, and the token spent (a second use is
// refused). It then deletes the machine and mints the next token, so
// every input starts from the same state.
func (g *fuzzBootstrapRig) registered(t testing.TB, name string) {
	t.Helper()
	ms := g.listMachines(t)
	if len(ms) != 1 || ms[0].Name != strings.TrimSpace(name) {
		t.Fatalf("after a registration as %q the machines are %+v", name, ms)
	}
	if st := g.tokenState(t); st != "used" {
		t.Fatalf("after a registration the token is %q, want used", st)
	}
	b, _ := json.Marshal(bootstrapBody{Token: g.token, Name: "again", Username: "pi"})
	if r := g.do(req{method: "POST", path: "/api/bootstrap", body: string(b), peer: g.peer()}); r.Code != 401 {
		t.Fatalf("a spent token registered again: %d %s", r.Code, r.Body)
	}
	if r := g.do(req{method: "DELETE", path: fmt.Sprintf("/api/machines/%d", ms[0].ID), cookie: g.cookie}); r.Code != 200 {
		t.Fatalf("DELETE /api/machines/%d: %d %s", ms[0].ID, r.Code, r.Body)
	}
	g.mint(t)
}

// FuzzBootstrapRequest posts arbitrary bodies to POST /api/bootstrap, the
// machines' own public door (@TOKEN@ in a body stands for the one live
// token). Whatever arrives: no 5xx; a refusal is 400, 401 or 413 with an
// error message, creates no machine and leaves the token unspent (a
// valid bootstrap with it still succeeds: checked after every seed, and
// every 50th input while fuzzing); a success carries the live token,
// registers exactly the machine the body names and spends the token.
func FuzzBootstrapRequest(f *testing.F) {
	for _, s := range []string{
		`{"token":"@TOKEN@","name":"box","username":"pi"}`,
		`{"token":"@TOKEN@","name":"  spaced  ","username":"pi"}`,
		`{"token":"@TOKEN@","name":"box","username":"pi","extra":1}`,
		`{"token":"@TOKEN@","name":"box","username":"pi"} {}`,
		`{"token":"@TOKEN@","name":"","username":"pi"}`,
		`{"token":"@TOKEN@","name":"box","username":"root; reboot"}`,
		`{"token":"@TOKEN@","name":"a\u0000b","username":"pi"}`,
		`{"token":"@TOKEN@","name":"` + strings.Repeat("x", 300) + `","username":"pi"}`,
		`{"token":"@TOKEN@ ","name":"box","username":"pi"}`,
		`{"token":"@TOKEN@","token":"x","name":"box","username":"pi"}`,
		`{"TOKEN":"@TOKEN@","Name":"box","USERNAME":"pi"}`,
		`{"token":"not-a-token","name":"box","username":"pi"}`,
		`{"token":5,"name":"box","username":"pi"}`,
		`{"token":null}`, `{}`, `[]`, `null`, `{`, ``, `"@TOKEN@"`,
	} {
		f.Add(s)
	}
	g := &fuzzBootstrapRig{machinesEnv: newMachinesEnv(f, wide)}
	g.mint(f)
	// A real bootstrap with the live token after a refusal: after every
	// seed, but only every 50th input while fuzzing (with the deletion
	// and the new token it costs as much as a dozen refusals).
	proveEvery := uint32(1)
	if fuzzing() {
		proveEvery = 50
	}
	var inputs uint32
	allowed := map[int]bool{200: true, 400: true, 401: true, 413: true}
	f.Fuzz(func(t *testing.T, body string) {
		g.t = t
		inputs++
		token := g.token
		body = strings.ReplaceAll(body, bootstrapTokenPlaceholder, token)
		r := g.do(req{method: "POST", path: "/api/bootstrap", body: body, peer: g.peer()})
		if !allowed[r.Code] {
			t.Fatalf("POST /api/bootstrap %q: status %d %s", body, r.Code, r.Body)
		}
		if r.Code == 200 {
			var in bootstrapBody
			if err := decodeFrom(strings.NewReader(body), &in); err != nil || in.Token != token {
				t.Fatalf("POST /api/bootstrap %q registered (body readable: %v, carries the live token: %v): %s",
					body, err == nil, in.Token == token, r.Body)
			}
			var reg struct {
				Data struct {
					TunnelPort int    `json:"tunnel_port"`
					VPSKey     string `json:"vps_ssh_public_key"`
					Config     string `json:"revtunnel_client_config"`
				} `json:"data"`
			}
			if err := json.Unmarshal(r.Body.Bytes(), &reg); err != nil || reg.Data.TunnelPort == 0 || reg.Data.VPSKey == "" || reg.Data.Config == "" {
				t.Fatalf("POST /api/bootstrap %q: 200 without a registration: %s", body, r.Body)
			}
			g.registered(t, in.Name)
			return
		}
		var env struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(r.Body.Bytes(), &env); err != nil || env.Error == "" {
			t.Fatalf("POST /api/bootstrap %q: %d body %s is not an error envelope", body, r.Code, r.Body)
		}
		if ms := g.listMachines(t); len(ms) != 0 {
			t.Fatalf("POST /api/bootstrap %q was refused (%d) but left machines: %+v", body, r.Code, ms)
		}
		if st := g.tokenState(t); st != "pending" {
			t.Fatalf("POST /api/bootstrap %q was refused (%d) but the token is %q", body, r.Code, st)
		}
		if inputs%proveEvery == 0 || inputs == 1 {
			b, _ := json.Marshal(bootstrapBody{Token: token, Name: "proof", Username: "pi"})
			if r := g.do(req{method: "POST", path: "/api/bootstrap", body: string(b), peer: g.peer()}); r.Code != 200 {
				t.Fatalf("after POST /api/bootstrap %q was refused, the live token no longer registers: %d %s", body, r.Code, r.Body)
			}
			g.registered(t, "proof")
		}
	})
}
