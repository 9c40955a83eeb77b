package agent

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LibDir holds what the machine keeps for updates: bundle-version,
// update-state, previous/ (the bundle before the last update) and
// rollback.sh.
const LibDir = "/usr/local/lib/tunnelsvc"

// Update states, as GET /status reports them.
const (
	UpdateDownloading = "downloading"
	UpdateApplying    = "applying"
	UpdateFailed      = "failed"
	UpdateRolledBack  = "rolled_back"
	UpdateCurrent     = "current"
)

// UpdateState is the last update this machine saw. Root writes it to
// LibDir/update-state (apply-update, confirm-update, rollback.sh); the agent,
// which cannot write there, adds what it knows of a download in progress.
type UpdateState struct {
	State   string `json:"state"`
	Version string `json:"version"`
	Error   string `json:"error,omitempty"`
	At      string `json:"at"`
}

func (u UpdateState) at() time.Time {
	t, _ := time.Parse(time.RFC3339, u.At)
	return t
}

// readUpdateState reads lib/update-state; ok is false when there is none.
func readUpdateState(lib string) (UpdateState, bool) {
	b, err := os.ReadFile(filepath.Join(lib, "update-state"))
	if err != nil {
		return UpdateState{}, false
	}
	var u UpdateState
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "state":
			u.State = v
		case "version":
			u.Version = v
		case "error":
			u.Error = v
		case "at":
			u.At = v
		}
	}
	return u, u.State != ""
}

func (u UpdateState) file() []byte {
	oneLine := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	return []byte("state=" + oneLine(u.State) + "\nversion=" + oneLine(u.Version) +
		"\nerror=" + oneLine(u.Error) + "\nat=" + oneLine(u.At) + "\n")
}

// readBundleVersion is lib/bundle-version, or def on a machine that has
// not been updated since it was bootstrapped.
func readBundleVersion(lib, def string) string {
	b, err := os.ReadFile(filepath.Join(lib, "bundle-version"))
	if v := strings.TrimSpace(string(b)); err == nil && v != "" {
		return v
	}
	return def
}
