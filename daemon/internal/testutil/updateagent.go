package testutil

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// Outcome is what an UpdatingAgent's machine does with an update.
type Outcome int

const (
	// Succeeds: the new agent (version B) comes up after Restart.
	Succeeds Outcome = iota
	// Fails: the helper refuses; the state is failed with FailWith.
	Fails
	// RollsBack: the new agent never checks in; the rollback restores the
	// previous bundle and says so.
	RollsBack
	// Hangs: nothing ever changes (the machine went away).
	Hangs
)

// UpdatingAgent is a machine whose agent can update, as contract 26 §2
// describes it: the real agent.Server answers the challenge and every route
// it knows, and this wrapper adds the fields and routes of update-capable
// agents, verified and signed with the same token. It stands in until the
// agent side of fleet updates lands, and lets a test choose each machine's
// fate.
type UpdatingAgent struct {
	Token string
	// Capable: the agent reports the "update" capability.
	Capable bool
	Arch    string
	Outcome Outcome
	// FailWith is the helper's words when Outcome is Fails.
	FailWith string
	// Download: fetch the bundle's URL and check size and SHA-256 as the
	// agent does; a mismatch fails the update with the agent's words.
	Download bool
	// Restart is how long the agent is away (unreachable) while it
	// restarts into the new version.
	Restart time.Duration

	real *agent.Server

	mu        sync.Mutex
	version   string
	bundle    string
	update    map[string]string
	downUntil time.Time
	calls     []string
}

// NewUpdatingAgent runs version (agent and bundle alike) on a machine
// whose tunnel client runs and takes every config (idleMachine).
func NewUpdatingAgent(token, version string) *UpdatingAgent {
	a := &UpdatingAgent{Token: token, Capable: true, Arch: "amd64", version: version, bundle: version}
	a.real = &agent.Server{Token: token, Unit: "revtunnel-client.service", Version: version, Sys: IdleMachine{}, Later: func(f func()) { f() }}
	return a
}

// idleMachine is the machine side of an UpdatingAgent: its tunnel client
// runs, and restarts, configs and uninstalls succeed without doing anything.
// IdleMachine is the system under an agent on a machine whose tunnel
// client runs and takes every config and restart (and changes nothing).
type IdleMachine struct {
	// Client is the tunnel client's version (nil: "0.61.1").
	Client func(context.Context) (string, error)
}

func (IdleMachine) UnitState(context.Context) (map[string]string, error) {
	return map[string]string{"ActiveState": "active", "SubState": "running"}, nil
}
func (IdleMachine) Restart(context.Context) error             { return nil }
func (IdleMachine) ApplyConfig(context.Context, []byte) error { return nil }
func (m IdleMachine) ClientVersion(ctx context.Context) (string, error) {
	if m.Client != nil {
		return m.Client(ctx)
	}
	return "0.61.1", nil
}
func (IdleMachine) Monotonic() (time.Duration, error) { return time.Minute, nil }
func (IdleMachine) Uninstall(context.Context) error   { return nil }

// NoHostTools stands in for the host's tools the daemon drives (nft,
// sysctl, fail2ban-client): they succeed and change nothing on the
// machine running the tests.
type NoHostTools struct{}

func (NoHostTools) Run(context.Context, string, ...string) cmdrun.Result { return cmdrun.Result{} }

// Calls lists the update requests the agent accepted ("update B",
// "confirm B").
func (a *UpdatingAgent) Calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

// Version is the agent's running version.
func (a *UpdatingAgent) Version() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}

func (a *UpdatingAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	down := time.Now().Before(a.downUntil)
	a.mu.Unlock()
	if down {
		// Restarting: the tunnel has no agent behind it.
		hj, ok := w.(http.Hijacker)
		if ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		http.Error(w, "restarting", http.StatusBadGateway)
		return
	}
	route := r.Method + " " + r.URL.Path
	if route != "GET /status" && route != "POST /update" && route != "POST /update/confirm" {
		a.real.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	// The real agent checks the signature and redeems the challenge: it
	// answers the request as GET /status, whose answer we then extend.
	sig := r.Header.Get(agent.HeaderSignature)
	nonce := r.Header.Get(agent.HeaderNonce)
	if !agent.SignatureOK(sig, agent.RequestSignature(a.Token, r.Method, r.URL.RequestURI(), body, r.Header.Get(agent.HeaderChallenge), nonce)) {
		a.real.ServeHTTP(w, r.Clone(r.Context()))
		return
	}
	st := httptest.NewRecorder()
	inner := httptest.NewRequest("GET", "/status", nil)
	inner.Header.Set(agent.HeaderChallenge, r.Header.Get(agent.HeaderChallenge))
	inner.Header.Set(agent.HeaderNonce, nonce)
	inner.Header.Set(agent.HeaderSignature, agent.RequestSignature(a.Token, "GET", "/status", nil, r.Header.Get(agent.HeaderChallenge), nonce))
	a.real.ServeHTTP(st, inner)
	if st.Code != http.StatusOK {
		a.reply(w, nonce, st.Code, st.Body.Bytes())
		return
	}
	switch route {
	case "GET /status":
		var m map[string]any
		json.Unmarshal(st.Body.Bytes(), &m)
		a.mu.Lock()
		m["agent_version"] = a.version
		if a.Capable {
			m["capabilities"] = []string{"update"}
			m["arch"] = a.Arch
			m["bundle_version"] = a.bundle
			if a.update != nil {
				m["update"] = a.update
			}
		}
		a.mu.Unlock()
		b, _ := json.Marshal(m)
		a.reply(w, nonce, 200, b)
	case "POST /update":
		if !a.Capable {
			a.reply(w, nonce, 404, []byte(`{"error":"not found"}`))
			return
		}
		var man struct {
			Version, URL, SHA256 string
			Size                 int64
		}
		if json.Unmarshal(body, &man) != nil || man.Version == "" || man.URL == "" || len(man.SHA256) != 64 || man.Size < 1 {
			a.reply(w, nonce, 400, []byte(`{"error":"every field is required"}`))
			return
		}
		a.mu.Lock()
		a.calls = append(a.calls, "update "+man.Version)
		a.update = map[string]string{"state": "downloading", "version": man.Version, "at": time.Now().UTC().Format(time.RFC3339)}
		a.mu.Unlock()
		go a.apply(man.Version, man.URL, man.SHA256, man.Size)
		a.reply(w, nonce, 202, []byte(`{"message":"downloading the bundle"}`))
	case "POST /update/confirm":
		var c struct{ Version string }
		json.Unmarshal(body, &c)
		a.mu.Lock()
		defer a.mu.Unlock()
		if c.Version != a.version {
			a.replyLocked(w, nonce, 409, []byte(fmt.Sprintf(`{"error":"this agent runs %s, not %s"}`, a.version, c.Version)))
			return
		}
		a.calls = append(a.calls, "confirm "+c.Version)
		a.update = map[string]string{"state": "current", "version": c.Version, "at": time.Now().UTC().Format(time.RFC3339)}
		a.replyLocked(w, nonce, 200, []byte(`{"message":"update confirmed"}`))
	}
}

func (a *UpdatingAgent) apply(version, url, sum string, size int64) {
	set := func(state, errText string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.update = map[string]string{"state": state, "version": version, "error": errText, "at": time.Now().UTC().Format(time.RFC3339)}
	}
	if a.Download {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			set("failed", "could not download the bundle: "+err.Error())
			return
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, size+1))
		resp.Body.Close()
		got := sha256.Sum256(data)
		if resp.StatusCode != 200 || int64(len(data)) != size {
			set("failed", fmt.Sprintf("bundle refused: size mismatch (expected %d bytes, got %d); nothing was changed", size, len(data)))
			return
		}
		if !bytes.Equal([]byte(hex.EncodeToString(got[:])), []byte(sum)) {
			set("failed", fmt.Sprintf("bundle refused: SHA-256 mismatch (expected %s, got %x); nothing was changed", sum, got))
			return
		}
	}
	switch a.Outcome {
	case Fails:
		set("failed", a.FailWith)
	case RollsBack:
		a.mu.Lock()
		prev := a.bundle
		a.mu.Unlock()
		set("rolled_back", fmt.Sprintf("the new agent (%s) did not check in within 60 s; bundle %s was restored", version, prev))
	case Succeeds:
		set("applying", "")
		a.mu.Lock()
		a.downUntil = time.Now().Add(a.Restart)
		a.version, a.bundle = version, version
		a.mu.Unlock()
	}
}

func (a *UpdatingAgent) reply(w http.ResponseWriter, nonce string, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(agent.HeaderSignature, agent.ResponseSignature(a.Token, nonce, status, body))
	w.WriteHeader(status)
	w.Write(body)
}

func (a *UpdatingAgent) replyLocked(w http.ResponseWriter, nonce string, status int, body []byte) {
	a.reply(w, nonce, status, body)
}
