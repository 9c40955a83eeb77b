package testutil

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

// OldAgent stands in for tunnel-agent as installed before signed requests
// (commit 343db07, daemon/agent/agent.go): its authorization and its routes,
// copied. Every request must carry the agent token as a Bearer header;
// anything else is 401 with WWW-Authenticate. It records the requests that
// carried the token.
type OldAgent struct {
	Token string
	Unit  string
	Sys   agent.System

	mu   sync.Mutex
	seen []string
}

// Seen lists the requests that carried the token, "METHOD path" each.
func (s *OldAgent) Seen() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.seen, ",")
}

func (s *OldAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tunnel-agent"`)
		writeOldJSON(w, http.StatusUnauthorized, map[string]string{"error": "agent token required (Authorization: Bearer <token>)"})
		return
	}
	s.mu.Lock()
	s.seen = append(s.seen, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	switch r.Method + " " + r.URL.Path {
	case "GET /status":
		props, err := s.Sys.UnitState(ctx)
		if err != nil {
			writeOldJSON(w, http.StatusInternalServerError, map[string]string{"error": "could not read the state of " + s.Unit + ": " + err.Error()})
			return
		}
		st := agent.Status{Unit: s.Unit, ActiveState: props["ActiveState"], SubState: props["SubState"], AgentVersion: "0.9.0"}
		if st.ActiveState == "active" {
			if since, err := strconv.ParseInt(props["ActiveEnterTimestampMonotonic"], 10, 64); err == nil && since > 0 {
				if now, err := s.Sys.Monotonic(); err == nil && now > time.Duration(since)*time.Microsecond {
					st.UptimeSeconds = int64((now - time.Duration(since)*time.Microsecond) / time.Second)
				}
			}
		}
		if v, err := s.Sys.ClientVersion(ctx); err == nil {
			st.ClientVersion = v
		} else {
			st.ClientVersion = "unknown (" + err.Error() + ")"
		}
		writeOldJSON(w, http.StatusOK, st)
	case "POST /restart":
		// Answer first, then restart: the answer travels through the
		// tunnel client being restarted.
		writeOldJSON(w, http.StatusAccepted, map[string]string{"message": s.Unit + " restart started; the tunnel reconnects in a few seconds"})
		go func() {
			time.Sleep(500 * time.Millisecond)
			s.Sys.Restart(context.Background())
		}()
	case "PUT /config":
		body, err := io.ReadAll(io.LimitReader(r.Body, agent.MaxConfigBytes+1))
		if err != nil {
			writeOldJSON(w, http.StatusBadRequest, map[string]string{"error": "could not read the config: " + err.Error()})
			return
		}
		if len(body) > agent.MaxConfigBytes {
			writeOldJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("config larger than %d bytes", agent.MaxConfigBytes)})
			return
		}
		if strings.TrimSpace(string(body)) == "" {
			writeOldJSON(w, http.StatusBadRequest, map[string]string{"error": "empty config; the installed one is kept"})
			return
		}
		if err := s.Sys.ApplyConfig(ctx, body); err != nil {
			if errors.Is(err, agent.ErrRefused) {
				writeOldJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error() + "; the installed config is kept"})
				return
			}
			writeOldJSON(w, http.StatusInternalServerError, map[string]string{"error": "could not apply the config: " + err.Error()})
			return
		}
		writeOldJSON(w, http.StatusOK, map[string]string{"message": "config installed and " + s.Unit + " reloaded"})
	case "POST /uninstall":
		if err := s.Sys.Uninstall(ctx); err != nil {
			writeOldJSON(w, http.StatusInternalServerError, map[string]string{"error": "could not uninstall: " + err.Error()})
			return
		}
		writeOldJSON(w, http.StatusAccepted, map[string]string{"message": "uninstall started; this agent stops with it"})
	default:
		switch r.URL.Path {
		case "/status", "/restart", "/config", "/uninstall":
			writeOldJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
		default:
			writeOldJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
		}
	}
}

func (s *OldAgent) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || s.Token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.Token)) == 1
}

func writeOldJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
