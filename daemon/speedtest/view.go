package speedtest

import (
	"math"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Test is a speed test as the API shows it. The measurements are null
// until measured (and stay null when the test failed before them).
type Test struct {
	ID        int64  `json:"id"`
	MachineID int64  `json:"machine_id"`
	Edge      string `json:"edge"`
	// State: running, done or failed.
	State string `json:"state"`
	// Phase, while it runs: download, upload, rtt or mtu.
	Phase string `json:"phase"`
	// Progress is the percentage done (100 once it ended).
	Progress int `json:"progress"`
	// Seconds bounds each direction.
	Seconds    int        `json:"seconds"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// DownloadMbps (edge to machine) and UploadMbps (machine to edge):
	// megabits per second after the first quarter of each direction.
	DownloadMbps *float64 `json:"download_mbps"`
	UploadMbps   *float64 `json:"upload_mbps"`
	// RTTMillis is the lowest of RoundTrips round trips.
	RTTMillis *float64 `json:"rtt_ms"`
	// MTU is the path MTU toward the edge; Payload the largest ICMP echo
	// payload that passes unfragmented (`ping -M do -s`).
	MTU     *int   `json:"mtu"`
	Payload *int   `json:"payload"`
	Error   string `json:"error"`
}

// view is t for the API, with the progress of a test this edge runs.
func (s *Service) view(t store.SpeedTest) Test {
	v := Test{ID: t.ID, MachineID: t.MachineID, Edge: t.Edge, State: t.State, Phase: t.Phase, Seconds: t.Seconds,
		StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, MTU: t.MTU, Payload: t.Payload, Error: t.Error,
		DownloadMbps: scaled(t.DownloadKbps, 1000, 10), UploadMbps: scaled(t.UploadKbps, 1000, 10), RTTMillis: scaled(t.RTTMicros, 1000, 10)}
	switch {
	case t.State != store.SpeedTestRunning:
		v.Phase, v.Progress = "", 100
	default:
		// Another edge's test shows the start of its phase.
		v.Progress = int(span[t.Phase][0])
		s.mu.Lock()
		p := s.live[t.ID]
		s.mu.Unlock()
		if p != nil {
			v.Phase, v.Progress = p.at(time.Now())
		}
	}
	return v
}

// scaled is n/div rounded to 1/round, or nil.
func scaled(n *int64, div, round float64) *float64 {
	if n == nil {
		return nil
	}
	f := math.Round(float64(*n)/div*round) / round
	return &f
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

func derefInt(n *int) int {
	if n == nil {
		return 0
	}
	return *n
}
