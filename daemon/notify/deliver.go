package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/networds"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Event kinds, as sent in the JSON payload and shown in the activity feed.
const (
	KindTest           = "test"
	KindMachineOffline = "machine_offline"
	KindMachineOnline  = "machine_online"
	KindBanned         = "address_banned"
	KindCertExpiring   = "certificate_expiring"
	KindLoginBurst     = "failed_login_burst"
	KindDiskLow        = "data_disk_low"
	KindDiskOK         = "data_disk_ok"
	// A site served by several machines: every target failed its health
	// check (the site is down), or one is healthy again.
	KindSiteDown = "site_down"
	KindSiteUp   = "site_up"
)

// Activity feed kinds of deliveries.
const (
	EventSent   = "notification_sent"
	EventFailed = "notification_failed"
)

// Delivery retries: at most MaxAttempts, waiting FirstBackoff, then twice
// as long each time (1 s, 2 s, 4 s, 8 s by default).
const (
	MaxAttempts  = 5
	FirstBackoff = time.Second
	sendTimeout  = 10 * time.Second
)

// Notification is one thing to tell the operator.
type Notification struct {
	Kind      string
	Title     string
	Message   string
	MachineID int64
}

// Payload is the body of the json preset.
type Payload struct {
	Kind      string    `json:"kind"`
	Title     string    `json:"title"`
	Message   string    `json:"message"`
	MachineID int64     `json:"machine_id,omitempty"`
	Time      time.Time `json:"time"`
}

// Sender delivers notifications to the configured webhook.
type Sender struct {
	Store *store.Store
	Log   *slog.Logger
	Now   func() time.Time
	// Client defaults to one with a 10 s timeout.
	Client *http.Client
	// Backoff is the first wait between attempts (0: FirstBackoff).
	Backoff time.Duration
	// Life bounds the deliveries in the background (the daemon's life;
	// nil: none): once it ends, a delivery waiting to try again gives up,
	// and Wait returns.
	Life context.Context

	wg sync.WaitGroup
}

func (s *Sender) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s *Sender) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Notify delivers n in the background with retries, when a webhook is set.
func (s *Sender) Notify(ctx context.Context, n Notification) {
	set, err := Load(ctx, s.Store)
	if err != nil {
		s.log().Error("notify: settings unreadable", "err", err)
		return
	}
	if set.URL == "" {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// Not the request's: the delivery outlives it, but not the daemon.
		life := s.Life
		if life == nil {
			life = context.WithoutCancel(ctx)
		}
		s.deliver(life, set, n, MaxAttempts)
	}()
}

// Wait waits for background deliveries (shutdown, tests).
func (s *Sender) Wait() { s.wg.Wait() }

// Test sends a test notification once, now, and says whether it arrived.
func (s *Sender) Test(ctx context.Context, set Settings) error {
	if set.URL == "" {
		return InputError("no webhook URL is set")
	}
	return s.deliver(ctx, set, Notification{Kind: KindTest, Title: "tunnelsvc test notification",
		Message: "This is a test from your tunnelsvc dashboard: notifications reach you."}, 1)
}

// deliver tries up to attempts times and records the outcome in the
// activity feed.
func (s *Sender) deliver(ctx context.Context, set Settings, n Notification, attempts int) error {
	wait := s.Backoff
	if wait <= 0 {
		wait = FirstBackoff
	}
	var err error
	tried := 0
retry:
	for tried < attempts {
		tried++
		if err = s.send(ctx, set, n); err == nil {
			s.record(ctx, store.Event{Source: "machine", Kind: EventSent, MachineID: n.MachineID,
				Message: fmt.Sprintf("notification %q sent to the %s webhook (attempt %d)", n.Title, set.Preset, tried)})
			return nil
		}
		if tried == attempts {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break retry
		case <-time.After(wait):
		}
		wait *= 2
	}
	s.log().Warn("notify: delivery failed", "kind", n.Kind, "err", err)
	s.record(ctx, store.Event{Source: "machine", Kind: EventFailed, MachineID: n.MachineID,
		Message: fmt.Sprintf("notification %q could not be delivered to the %s webhook after %d attempt(s): %v", n.Title, set.Preset, tried, err)})
	return err
}

func (s *Sender) record(ctx context.Context, e store.Event) {
	e.CreatedAt = s.now()
	if err := s.Store.InsertEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log().Error("notify: activity event write failed", "err", err)
	}
}

func (s *Sender) send(ctx context.Context, set Settings, n Notification) error {
	var body []byte
	hdr := http.Header{}
	switch set.Preset {
	case PresetNtfy:
		body = []byte(n.Message)
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		hdr.Set("Title", n.Title)
		hdr.Set("Tags", n.Kind)
		if n.Kind != KindTest && n.Kind != KindMachineOnline && n.Kind != KindDiskOK {
			hdr.Set("Priority", "high")
		}
	default:
		body, _ = json.Marshal(Payload{Kind: n.Kind, Title: n.Title, Message: n.Message, MachineID: n.MachineID, Time: s.now().UTC()})
		hdr.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, set.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = hdr
	req.Header.Set("User-Agent", "tunnelsvc-notify")
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: sendTimeout}
	}
	resp, err := c.Do(req)
	if err != nil {
		// In words, naming the webhook's host only: its URL may carry a
		// secret (an ntfy topic), which stays out of the feed.
		return errors.New(networds.Say(err))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the webhook answered %s %s", resp.Status, strings.TrimSpace(string(snippet)))
	}
	return nil
}
