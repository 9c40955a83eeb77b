package revtunnel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// frpResponse is frp's own plugin answer (frp pkg/plugin/server/types.go,
// Response): what frps decodes the plugin's 200 into.
type frpResponse struct {
	Reject       bool   `json:"reject"`
	RejectReason string `json:"reject_reason"`
	Unchange     bool   `json:"unchange"`
	Content      any    `json:"content"`
}

// fuzzPluginOps are the ops FuzzPluginRequest wraps a content in; one
// more index sends the fuzzed string as the whole body.
var fuzzPluginOps = []string{"Login", "NewProxy", "NewWorkConn", "NewUserConn", "Ping", "CloseProxy", "NoSuchOp"}

// fuzzMachine is a registered machine as the plugin's oracle sees it: its
// login, and the (port, proxy type) pairs frps may open for it.
type fuzzMachine struct {
	user, secret string
	ports        map[int]string // remote port: its proxy type
	tunnels      map[int64]bool
}

// owns reports whether proxy name is one of m's: its ssh or agent proxy,
// or one of its tunnels ("tunnel-" and an id, as the plugin parses it).
func (m fuzzMachine) owns(name string) bool {
	short, ok := strings.CutPrefix(name, m.user+".")
	if !ok {
		return false
	}
	if short == frpconf.ProxySSH || short == frpconf.ProxyAgent {
		return true
	}
	rest, ok := strings.CutPrefix(short, "tunnel-")
	id, err := strconv.ParseInt(rest, 10, 64)
	return ok && err == nil && m.tunnels[id]
}

// FuzzPluginRequest posts arbitrary plugin calls to the frps server
// plugin, for each op frps sends and one it never does, or an arbitrary
// whole body. Two machines are registered, with a tcp and a udp tunnel
// each; @USER@/@SECRET@ (@USER2@/@SECRET2@) in an input stand for the
// first's (second's) login, @SSHPORT@, @AGENTPORT@, @TCP@/@TCPPORT@ and
// @UDP@/@UDPPORT@ for its proxies' names and ports. Whatever arrives: no
// panic; no 5xx (the store is healthy: a 500 is only for a failing
// database); a 400 exactly when the body is not JSON of the request's
// shape; every other answer a 200 with frp's plugin JSON, which either
// rejects with a reason or accepts unchanged; an unknown op is rejected;
// and nothing is accepted without a known machine's login: Login, Ping
// and NewWorkConn only with the user and secret of one machine, NewProxy
// only for a port and proxy type of that machine under its own name, and
// NewUserConn only to one of that machine's proxies.
func FuzzPluginRequest(f *testing.F) {
	const (
		creds  = `{"user":"@USER@","metas":{"token":"@SECRET@"}}`
		creds2 = `{"user":"@USER2@","metas":{"token":"@SECRET2@"}}`
	)
	proxy := func(c, name, typ, port string) string {
		return `{"user":` + c + `,"proxy_name":"` + name + `","proxy_type":"` + typ + `","remote_port":` + port + `}`
	}
	const (
		login, newProxy, newWorkConn, newUserConn, ping, closeProxy, noSuchOp = 0, 1, 2, 3, 4, 5, 6
	)
	for _, s := range []struct {
		op      uint8
		content string
	}{
		{login, `{"user":"@USER@","metas":{"token":"@SECRET@"},"client_address":"198.51.100.1:4000","run_id":"r"}`},
		{login, `{"user":"@USER2@","metas":{"token":"@SECRET@"}}`},
		{login, `{"user":{"user":"@USER@","metas":{"token":"@SECRET@"}}}`},
		{login, `{"user":"@USER@","metas":{"token":5}}`},
		{ping, `{"user":` + creds + `}`},
		{ping, `{"user":{"user":"@USER@","metas":{"token":"@SECRET2@"}}}`},
		{newWorkConn, `{"user":` + creds2 + `,"run_id":"r"}`},
		{newWorkConn, `{"user":"@USER@","metas":{"token":"@SECRET@"}}`},
		{newProxy, proxy(creds, "@USER@.ssh", "tcp", "@SSHPORT@")},
		{newProxy, proxy(creds, "@USER@.agent", "tcp", "@AGENTPORT@")},
		{newProxy, proxy(creds, "@USER@.@TCP@", "tcp", "@TCPPORT@")},
		{newProxy, proxy(creds, "@USER@.@UDP@", "udp", "@UDPPORT@")},
		{newProxy, proxy(creds, "@USER@.@UDP@", "tcp", "@UDPPORT@")},
		{newProxy, proxy(creds, "@USER@.@TCP@", "http", "@TCPPORT@")},
		{newProxy, proxy(creds, "@USER@.ssh", "tcp", "22")},
		{newProxy, proxy(creds, "@USER2@.ssh", "tcp", "@SSHPORT@")},
		{newProxy, proxy(creds2, "@USER@.@TCP@", "tcp", "@TCPPORT@")},
		{newProxy, proxy(creds, "@USER@.tunnel-0", "tcp", "0")},
		{newUserConn, proxy(creds, "@USER@.@TCP@", "tcp", "0")},
		{newUserConn, proxy(creds2, "@USER2@.@TCP@", "tcp", "0")},
		{newUserConn, proxy(creds, "@USER@.tunnel-999", "tcp", "0")},
		{closeProxy, proxy(creds, "@USER@.ssh", "tcp", "0")},
		{closeProxy, `null`},
		{noSuchOp, `{"user":` + creds + `}`},
		{newProxy, `[]`},
		{ping, `"x"`},
	} {
		f.Add(s.op, s.content)
	}
	raw := uint8(len(fuzzPluginOps))
	f.Add(raw, `{"version":"0.1.0","op":"Login","content":{"user":"@USER@","metas":{"token":"@SECRET@"}}}`)
	f.Add(raw, `{"op":"Login","op":"Ping","content":{"user":{"user":"@USER@","metas":{"token":"@SECRET@"}}}}`)
	f.Add(raw, `{"OP":"login","content":{"user":"@USER@","metas":{"token":"@SECRET@"}}}`)
	f.Add(raw, `{"op":"Login","content":{"user":"@USER@","metas":{"token":"@SECRET@"}}} trailing`)
	f.Add(raw, `{"op":"Login"}`)
	f.Add(raw, `{"op":7}`)
	f.Add(raw, `{`)
	f.Add(raw, ``)
	f.Add(raw, "\x00")

	ctx := context.Background()
	rig := newPluginRig(f, store.PortRange{Lo: 20000, Hi: 20099})
	var known []fuzzMachine
	subst := map[string]string{}
	for i, name := range []string{"alpha", "beta"} {
		pm := rig.register(f, name, 1)
		kind, tname, local := "udp", "u", 27015
		udp, err := rig.svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &pm.id, Name: &tname, Kind: &kind, LocalPort: &local})
		if err != nil {
			f.Fatal(err)
		}
		tcp, err := rig.svc.Tunnel(ctx, pm.tunnels[0])
		if err != nil {
			f.Fatal(err)
		}
		m, err := rig.svc.Store.GetMachine(ctx, pm.id)
		if err != nil {
			f.Fatal(err)
		}
		fm := fuzzMachine{user: pm.user, secret: pm.secret,
			ports:   map[int]string{m.TunnelPort: "tcp", tcp.RemotePort: "tcp", udp.RemotePort: "udp"},
			tunnels: map[int64]bool{tcp.ID: true, udp.ID: true}}
		if m.AgentPort != 0 {
			fm.ports[m.AgentPort] = "tcp"
		}
		known = append(known, fm)
		if i == 0 {
			for k, v := range map[string]string{
				"@USER@": pm.user, "@SECRET@": pm.secret,
				"@SSHPORT@": strconv.Itoa(m.TunnelPort), "@AGENTPORT@": strconv.Itoa(m.AgentPort),
				"@TCP@": frpconf.TunnelProxy(tcp.ID), "@TCPPORT@": strconv.Itoa(tcp.RemotePort),
				"@UDP@": frpconf.TunnelProxy(udp.ID), "@UDPPORT@": strconv.Itoa(udp.RemotePort),
			} {
				subst[k] = v
			}
		} else {
			subst["@USER2@"], subst["@SECRET2@"] = pm.user, pm.secret
		}
	}
	// The longer names first: @USER2@ is not @USER@ followed by 2.
	var pairs []string
	for _, k := range []string{"@USER2@", "@SECRET2@", "@USER@", "@SECRET@", "@SSHPORT@", "@AGENTPORT@", "@TCPPORT@", "@UDPPORT@", "@TCP@", "@UDP@"} {
		pairs = append(pairs, k, subst[k])
	}
	placeholders := strings.NewReplacer(pairs...)

	f.Fuzz(func(t *testing.T, op uint8, content string) {
		content = placeholders.Replace(content)
		body := content
		if i := int(op) % (len(fuzzPluginOps) + 1); i < len(fuzzPluginOps) {
			body = `{"version":"0.1.0","op":"` + fuzzPluginOps[i] + `","content":` + content + `}`
		}
		w := rig.call(body)

		// The request as the plugin reads it: one JSON value (what
		// follows it is not read).
		var call struct {
			Op      string          `json:"op"`
			Content json.RawMessage `json:"content"`
		}
		readable := json.NewDecoder(strings.NewReader(body)).Decode(&call) == nil
		switch {
		case w.Code == 400 && !readable && strings.TrimSpace(w.Body.String()) == "invalid plugin request":
			return
		case w.Code != 200 || !readable:
			t.Fatalf("%q: status %d (request readable: %v): %s", body, w.Code, readable, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%q: Content-Type %q", body, ct)
		}
		var ans frpResponse
		dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ans); err != nil || dec.More() {
			t.Fatalf("%q: the answer %q is not frp's plugin response: %v", body, w.Body, err)
		}
		if ans.Reject == ans.Unchange || (ans.Reject && ans.RejectReason == "") || ans.Content != nil {
			t.Fatalf("%q: answer %s neither rejects with a reason nor accepts unchanged", body, w.Body)
		}
		if ans.Reject {
			return
		}

		// Accepted: only what a known machine's login may do.
		var c struct {
			User      json.RawMessage `json:"user"`
			Metas     map[string]string
			ProxyName string `json:"proxy_name"`
			ProxyType string `json:"proxy_type"`
			Port      int    `json:"remote_port"`
		}
		var u struct {
			User  string            `json:"user"`
			Metas map[string]string `json:"metas"`
		}
		json.Unmarshal(call.Content, &c)
		if call.Op == "Login" {
			json.Unmarshal(c.User, &u.User)
			u.Metas = c.Metas
		} else {
			json.Unmarshal(c.User, &u)
		}
		var who *fuzzMachine
		for i := range known {
			if u.User == known[i].user && u.Metas[frpconf.MetaToken] == known[i].secret {
				who = &known[i]
			}
		}
		switch call.Op {
		case "CloseProxy":
			// Closing is recorded, never refused.
		case "Login", "Ping", "NewWorkConn":
			if who == nil {
				t.Fatalf("%q: %s accepted without a known machine's login", body, call.Op)
			}
		case "NewProxy":
			if who == nil || !who.owns(c.ProxyName) || who.ports[c.Port] != c.ProxyType {
				t.Fatalf("%q: NewProxy %q (%s on port %d) accepted, which is no proxy of the machine that logged in (%v)",
					body, c.ProxyName, c.ProxyType, c.Port, who != nil)
			}
		case "NewUserConn":
			if who == nil || !who.owns(c.ProxyName) {
				t.Fatalf("%q: NewUserConn to %q accepted, which is no proxy of the machine that logged in (%v)", body, c.ProxyName, who != nil)
			}
		default:
			t.Fatalf("%q: unknown op %q accepted", body, call.Op)
		}
	})
}
