package speedtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// exchangeBound bounds an exchange with the agent beyond a direction's
// budget: the challenge before it, and the answer after.
const exchangeBound = 20 * time.Second

// transferFunc is one direction (Agents.SpeedDownload or SpeedUpload).
type transferFunc func(ctx context.Context, id int64, seconds int, limit int64, moved *atomic.Int64) (agent.Transfer, error)

// measure runs t's phases in order, recording in t what each measured;
// it stops at the first that fails.
func (s *Service) measure(ctx context.Context, t *store.SpeedTest, p *progress) error {
	for _, d := range []struct {
		phase string
		fn    transferFunc
		into  **int64
	}{{PhaseDownload, s.Agents.SpeedDownload, &t.DownloadKbps}, {PhaseUpload, s.Agents.SpeedUpload, &t.UploadKbps}} {
		s.enter(ctx, t, p, d.phase)
		tctx, cancel := context.WithTimeout(ctx, time.Duration(t.Seconds)*time.Second+agent.SpeedGrace+exchangeBound)
		got, err := d.fn(tctx, t.MachineID, t.Seconds, agent.MaxSpeedBytes, &p.moved)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", d.phase, err)
		}
		if got.Mbps() <= 0 {
			return fmt.Errorf("%s: too little arrived to measure (%d bytes)", d.phase, got.Bytes)
		}
		kbps := int64(math.Round(got.Mbps() * 1000))
		*d.into = &kbps
	}

	s.enter(ctx, t, p, PhaseRTT)
	rctx, cancel := context.WithTimeout(ctx, exchangeBound)
	rtts, err := s.Agents.RoundTrips(rctx, t.MachineID, RoundTrips)
	cancel()
	if err == nil && len(rtts) == 0 {
		err = errors.New("no exchange came back")
	}
	if err != nil {
		return fmt.Errorf("round trips: %w", err)
	}
	// The lowest, as ping's min: the link's own time. The others add
	// the wait for a processor on either host, which a busy edge or
	// machine adds to every exchange it makes, not to the link.
	rtt := slices.Min(rtts).Microseconds()
	t.RTTMicros = &rtt

	s.enter(ctx, t, p, PhaseMTU)
	mctx, cancel := context.WithTimeout(ctx, exchangeBound)
	defer cancel()
	host, err := s.Host(mctx, t.MachineID)
	if err != nil {
		return fmt.Errorf("path MTU: where the machine reaches this edge: %w", err)
	}
	mtu, err := s.Agents.PathMTU(mctx, t.MachineID, host)
	if err != nil {
		return fmt.Errorf("path MTU toward %s: %w", host, err)
	}
	t.MTU, t.Payload = &mtu.MTU, &mtu.Payload
	return nil
}

// enter records that t is in phase, here and (for the other edges) in the
// store.
func (s *Service) enter(ctx context.Context, t *store.SpeedTest, p *progress, phase string) {
	p.enter(phase, time.Now())
	t.Phase = phase
	if err := s.Store.SetSpeedTestPhase(ctx, t.ID, phase); err != nil {
		s.log().Warn("speed test: recording the phase failed", "test", t.ID, "phase", phase, "err", err)
	}
}

// progress is how far a test this edge runs has come.
type progress struct {
	seconds int
	moved   atomic.Int64 // bytes of the current direction

	mu    sync.Mutex
	phase string
	since time.Time
}

func (p *progress) enter(phase string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.since = phase, now
	p.moved.Store(0)
}

// span is each phase's share of the whole, in percent: the transfers take
// nearly all of a test's time.
var span = map[string][2]float64{PhaseDownload: {0, 45}, PhaseUpload: {45, 90}, PhaseRTT: {90, 97}, PhaseMTU: {97, 100}}

// at is the phase and the percentage done at now. Within a direction, the
// larger of the time and the bytes gone from its bounds.
func (p *progress) at(now time.Time) (string, int) {
	p.mu.Lock()
	phase, since := p.phase, p.since
	p.mu.Unlock()
	sp := span[phase]
	frac := 0.0
	if phase == PhaseDownload || phase == PhaseUpload {
		frac = max(now.Sub(since).Seconds()/float64(p.seconds), float64(p.moved.Load())/agent.MaxSpeedBytes)
	}
	frac = min(frac, 0.99)
	return phase, int(sp[0] + frac*(sp[1]-sp[0]))
}
