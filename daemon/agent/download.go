package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Updates is what an agent needs from the machine to update it. Commands
// has it; a System without it makes an agent that reports no "update"
// capability, as agents from before updates did.
type Updates interface {
	// ApplyUpdate runs apply-update with stdin (the header line, then the
	// bundle). Its error is the helper's own words.
	ApplyUpdate(ctx context.Context, stdin io.Reader) error
	// ConfirmUpdate runs confirm-update.
	ConfirmUpdate(ctx context.Context) error
}

// UpdateRequest is POST /update's body.
type UpdateRequest struct {
	Version string `json:"version"`
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

// DownloadTimeout bounds a bundle's download (default of Server.Download).
const DownloadTimeout = 5 * time.Minute

// ApplyTimeout bounds apply-update: it reloads systemd and may restart the
// tunnel client, which waits for its unit to stop.
const ApplyTimeout = 3 * time.Minute

// updater is the agent's side of an update in progress.
type updater struct {
	mu      sync.Mutex
	running bool
	state   *UpdateState // this process's last word on an update (nil: none)
	at      time.Time    // when state was set, to order it against the file
}

func (u *updater) set(st UpdateState, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st.At = now.UTC().Format(time.RFC3339)
	u.state, u.at = &st, now
}

// current merges this process's state with the one root wrote: the later
// wins (the file is written by apply-update after the agent said applying,
// by rollback.sh and confirm-update after this process is gone).
func (u *updater) current(file UpdateState, haveFile bool) *UpdateState {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.state == nil {
		if haveFile {
			return &file
		}
		return nil
	}
	if haveFile && file.at().After(u.at.Truncate(time.Second)) {
		return &file
	}
	st := *u.state
	return &st
}

func (s *Server) updates() (Updates, bool) {
	up, ok := s.Sys.(Updates)
	return up, ok
}

func (s *Server) lib() string {
	if s.Lib != "" {
		return s.Lib
	}
	return LibDir
}

func (s *Server) postUpdate(w http.ResponseWriter, body []byte) {
	up, ok := s.updates()
	if !ok {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this agent cannot update its machine"})
		return
	}
	var req UpdateRequest
	if err := decodeStrict(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad body: " + err.Error()})
		return
	}
	req.SHA256 = strings.ToLower(req.SHA256)
	if err := (UpdateHeader{Version: req.Version, SHA256: req.SHA256, Size: req.Size}).check(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if req.URL == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `"url" is required`})
		return
	}
	if u, err := url.Parse(req.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("url %q is not an absolute http(s) URL", req.URL)})
		return
	}
	s.upd.mu.Lock()
	if s.upd.running {
		s.upd.mu.Unlock()
		writeJSON(w, http.StatusConflict, map[string]string{"error": "an update is already running"})
		return
	}
	s.upd.running = true
	s.upd.mu.Unlock()
	s.upd.set(UpdateState{State: UpdateDownloading, Version: req.Version}, s.now())
	go s.update(up, req)
	writeJSON(w, http.StatusAccepted, map[string]string{"message": fmt.Sprintf(
		"downloading bundle %s (%d bytes); it is installed once its size and SHA-256 match, then the agent restarts", req.Version, req.Size)})
}

// update downloads and applies a bundle; its outcome is in GET /status.
// The outcome and the end of "running" are set together, once the download
// is removed, so that a daemon that sees it may start the next one at once.
func (s *Server) update(up Updates, req UpdateRequest) {
	st := s.runUpdate(up, req)
	if st.State == UpdateFailed {
		s.log().Error("update to "+req.Version+" failed", "err", st.Error)
	} else {
		// apply-update restarts this agent last (without waiting): the
		// new one reports the outcome.
		s.log().Info("bundle " + req.Version + " installed; the agent restarts")
	}
	s.upd.mu.Lock()
	defer s.upd.mu.Unlock()
	s.upd.running = false
	st.At = s.now().UTC().Format(time.RFC3339)
	s.upd.state, s.upd.at = &st, s.now()
}

func (s *Server) runUpdate(up Updates, req UpdateRequest) UpdateState {
	failed := func(err error) UpdateState {
		return UpdateState{State: UpdateFailed, Version: req.Version, Error: err.Error()}
	}
	f, err := s.download(req)
	if err != nil {
		return failed(err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	s.upd.set(UpdateState{State: UpdateApplying, Version: req.Version}, s.now())
	header, _ := json.Marshal(UpdateHeader{Version: req.Version, SHA256: req.SHA256, Size: req.Size})
	ctx, cancel := context.WithTimeout(context.Background(), ApplyTimeout)
	defer cancel()
	if err := up.ApplyUpdate(ctx, io.MultiReader(bytes.NewReader(append(header, '\n')), f)); err != nil {
		return failed(err)
	}
	return UpdateState{State: UpdateApplying, Version: req.Version}
}

// download fetches the bundle into a temporary file (the agent's private
// /tmp) and checks its size and SHA-256; the file is positioned at its start.
func (s *Server) download(req UpdateRequest) (*os.File, error) {
	timeout := s.DownloadTimeout
	if timeout == 0 {
		timeout = DownloadTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return nil, err
	}
	client := s.HTTPClient
	if client == nil {
		client = http.DefaultClient // the system's roots
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("could not download the bundle: %v; nothing was changed", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("could not download the bundle: %s answered %s; nothing was changed", req.URL, resp.Status)
	}
	f, err := os.CreateTemp(s.TempDir, "tunnelsvc-bundle-*.tar.gz")
	if err != nil {
		return nil, fmt.Errorf("could not store the bundle: %v; nothing was changed", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, req.Size+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("could not download the bundle within %s (%d of %d bytes); nothing was changed", timeout, n, req.Size)
		}
		return nil, fmt.Errorf("could not download the bundle: %v; nothing was changed", err)
	}
	if err := checkSize(n, req.Size); err != nil {
		return nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != req.SHA256 {
		return nil, shaMismatch(req.SHA256, got)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

// ConfirmRequest is POST /update/confirm's body.
type ConfirmRequest struct {
	Version string `json:"version"`
}

func (s *Server) confirmUpdate(ctx context.Context, w http.ResponseWriter, body []byte) {
	up, ok := s.updates()
	if !ok {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this agent cannot update its machine"})
		return
	}
	var req ConfirmRequest
	if err := decodeStrict(body, &req); err != nil || req.Version == "" {
		if err == nil {
			err = errors.New(`"version" is required`)
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad body: " + err.Error()})
		return
	}
	if req.Version != s.Version {
		writeJSON(w, http.StatusConflict, map[string]string{"error": fmt.Sprintf(
			"this agent is version %s, not %s: nothing to confirm (a rollback may have run)", s.Version, req.Version)})
		return
	}
	if err := up.ConfirmUpdate(ctx); err != nil {
		s.fail(w, "confirm the update", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": fmt.Sprintf(
		"update to %s confirmed; the rollback timer is stopped and the previous bundle stays in %s/previous", req.Version, s.lib())})
}

func decodeStrict(body []byte, v any) error {
	// Unknown fields are allowed: a newer daemon may say more.
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}
