package notify

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// What the watcher looks for, and how often.
const (
	DefaultCheckInterval = 30 * time.Second
	// CertWarning: a certificate that expires sooner is reported (once a day).
	CertWarning = 14 * 24 * time.Hour
	// A burst is LoginBurst failed logins within LoginBurstWindow; it is
	// reported at most once per window.
	LoginBurst       = 10
	LoginBurstWindow = 5 * time.Minute
	// The data disk is low when its free space is under DiskLowBytes or
	// under DiskLowPercent of its size: under the larger of the two.
	// It has room again at a tenth above that.
	DiskLowBytes   = 200_000_000
	DiskLowPercent = 5
)

// DiskLowThreshold is the free space under which a file system of size
// bytes is low: DiskLowPercent of it, or DiskLowBytes, whichever is larger.
func DiskLowThreshold(size uint64) uint64 {
	return max(DiskLowBytes, size/100*DiskLowPercent)
}

// Jail is a ban-tool jail and the addresses it bans now.
type Jail struct {
	Name   string
	Banned []string
}

// Watcher turns what it sees into notifications.
type Watcher struct {
	Store  *store.Store
	Sender *Sender
	Log    *slog.Logger
	Now    func() time.Time
	// Edge names this edge in what only it can see (its own certificates).
	Edge string
	// Interval between checks (0: DefaultCheckInterval).
	Interval time.Duration
	// Minute is how long one minute of the offline delay lasts (0: a
	// minute). Only tests shorten it.
	Minute time.Duration
	// Status is a machine's state and why (machines.StatusOf, which this
	// package cannot import); nil: the recorded status, no reason.
	Status func(m store.Machine) (state, reason string)
	// Jails reads the ban tool; nil skips ban notifications.
	Jails func(ctx context.Context) ([]Jail, error)
	// Sites returns the address the web proxy serves HTTPS on and the
	// names it has certificates for (nil: no certificate checks). The
	// watcher reads each name's certificate by a TLS handshake there:
	// Caddy keeps its files where only its own user may read them.
	Sites func(ctx context.Context) (addr string, names []string, err error)
	// LoginFailureKinds are the audit kinds that count as failed logins.
	LoginFailureKinds []string
	// Space measures the data directory's file system (store.Space); nil
	// skips the disk checks.
	Space func() (store.Space, error)
	// Lease, when set, takes or renews the cluster's lease on the
	// notifications that must be sent once (machines going offline and
	// back, login bursts) and returns its fence, 0 when another edge holds
	// it; without the lease those checks are skipped here. Bans, the disk
	// and the certificates are every edge's own.
	Lease func(ctx context.Context) int64
	// fence is the lease's fence at the last check this edge held it.
	fence int64

	mu           sync.Mutex
	seeded       bool
	offline      map[int64]bool  // machines reported offline
	banned       map[string]bool // jail + "\x00" + address
	certReported map[string]time.Time
	lastBurst    time.Time
	diskLow      bool // reported low, not yet back
	diskFull     bool // logged full, not yet back
}

func (w *Watcher) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

func (w *Watcher) log() *slog.Logger {
	if w.Log == nil {
		return slog.Default()
	}
	return w.Log
}

// Run checks every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	every := w.Interval
	if every <= 0 {
		every = DefaultCheckInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check looks once. The first check only learns the current state, so a
// restart does not repeat old news.
func (w *Watcher) Check(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set, err := Load(ctx, w.Store)
	if err != nil {
		w.log().Error("notify: settings unreadable", "err", err)
		return
	}
	first := !w.seeded
	if first {
		w.offline, w.banned, w.certReported = map[int64]bool{}, map[string]bool{}, map[string]time.Time{}
		w.seeded = true
	}
	if err := w.bans(ctx, first); err != nil {
		w.log().Debug("notify: ban check failed", "err", err)
	}
	w.disk(ctx)
	// Each edge's Caddy orders its own certificates: each edge checks its
	// own, lease or not.
	w.certs(ctx)
	fence := int64(1)
	if w.Lease != nil {
		fence = w.Lease(ctx)
	}
	if fence == 0 {
		return
	}
	if fence != w.fence && !first {
		// Taken over from another edge, or taken back after another held
		// it meanwhile (this edge was stopped past its lease): what this
		// edge remembers may be old. Learn the state first, so that what
		// the other edge already reported is not sent again.
		w.offline, w.lastBurst = map[int64]bool{}, w.now()
		first = true
	}
	w.fence = fence
	if err := w.machines(ctx, set, first); err != nil {
		w.log().Warn("notify: machine check failed", "err", err)
	}
	if err := w.logins(ctx); err != nil {
		w.log().Warn("notify: login check failed", "err", err)
	}
}

// disk reports the data disk going low (or full) once, and having room
// again once; it also logs when writes start and stop failing for lack of
// space. A disk already low when the daemon starts is reported: unlike an
// old outage, it is still to be dealt with.
func (w *Watcher) disk(ctx context.Context) {
	if w.Space == nil {
		return
	}
	sp, err := w.Space()
	if err != nil {
		w.log().Warn("notify: data disk check failed", "err", err)
		return
	}
	if sp.Full != w.diskFull {
		w.diskFull = sp.Full
		if sp.Full {
			w.log().Error("the data disk is full: logins and changes fail until space is freed on it", "dir", sp.Dir, "free_bytes", sp.Free)
		} else {
			w.log().Info("the data disk takes writes again", "dir", sp.Dir, "free_bytes", sp.Free)
		}
	}
	low := DiskLowThreshold(sp.Size)
	switch {
	case !w.diskLow && (sp.Full || sp.Free < low):
		w.diskLow = true
		title := "data disk almost full"
		if sp.Full {
			title = "data disk full"
		}
		w.Sender.Notify(ctx, Notification{Kind: KindDiskLow, Title: title,
			Message: fmt.Sprintf("The data disk (%s) has %s free of %s (%s); the warning is under %s (%d %% of the disk or %s, whichever is larger). "+
				"When it is full, logins and changes fail: free space on it.",
				sp.Dir, byteSize(sp.Free), byteSize(sp.Size), percent(sp.Free, sp.Size), byteSize(low), DiskLowPercent, byteSize(DiskLowBytes))})
	case w.diskLow && !sp.Full && sp.Free >= low+low/10:
		w.diskLow = false
		w.Sender.Notify(ctx, Notification{Kind: KindDiskOK, Title: "data disk has room again",
			Message: fmt.Sprintf("The data disk (%s) has %s free of %s (%s) again.", sp.Dir, byteSize(sp.Free), byteSize(sp.Size), percent(sp.Free, sp.Size))})
	}
}

// byteSize writes n in decimal units: 1.5 GB, 200 MB, 512 kB.
func byteSize(n uint64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) + " " + []string{"B", "kB", "MB", "GB", "TB"}[i]
}

func percent(part, whole uint64) string {
	if whole == 0 {
		return "0 %"
	}
	return fmt.Sprintf("%.1f %%", float64(part)*100/float64(whole))
}

func (w *Watcher) machines(ctx context.Context, set Settings, first bool) error {
	ms, err := w.Store.ListMachines(ctx)
	if err != nil {
		return err
	}
	unit := w.Minute
	if unit <= 0 {
		unit = time.Minute
	}
	delay := time.Duration(set.OfflineMinutes) * unit
	now := w.now()
	live := map[int64]bool{}
	for _, m := range ms {
		live[m.ID] = true
		state, reason := m.Status, ""
		if w.Status != nil {
			state, reason = w.Status(m)
		}
		switch {
		case state == "offline" && !w.offline[m.ID] && !m.LastSeen.IsZero() && now.Sub(m.LastSeen) >= delay:
			w.offline[m.ID] = true
			if first {
				continue
			}
			why := ""
			if reason != "" {
				why = " " + upperFirst(reason) + "."
			}
			w.Sender.Notify(ctx, Notification{Kind: KindMachineOffline, MachineID: m.ID,
				Title: fmt.Sprintf("machine %s is offline", m.Name),
				Message: fmt.Sprintf("Machine %q has been offline since %s (more than %d min).%s",
					m.Name, m.LastSeen.UTC().Format(time.RFC3339), set.OfflineMinutes, why)})
		case state == "online" && w.offline[m.ID]:
			delete(w.offline, m.ID)
			w.Sender.Notify(ctx, Notification{Kind: KindMachineOnline, MachineID: m.ID,
				Title:   fmt.Sprintf("machine %s is back online", m.Name),
				Message: fmt.Sprintf("Machine %q is back online.", m.Name)})
		}
	}
	for id := range w.offline {
		if !live[id] {
			delete(w.offline, id) // deleted machines are no news
		}
	}
	return nil
}

func (w *Watcher) bans(ctx context.Context, first bool) error {
	if w.Jails == nil {
		return nil
	}
	jails, err := w.Jails(ctx)
	if err != nil {
		return err
	}
	now := map[string]bool{}
	for _, j := range jails {
		sort.Strings(j.Banned)
		for _, a := range j.Banned {
			k := j.Name + "\x00" + a
			now[k] = true
			if w.banned[k] || first {
				continue
			}
			w.Sender.Notify(ctx, Notification{Kind: KindBanned, Title: "address banned: " + a,
				Message: fmt.Sprintf("The ban tool banned %s (jail %s).", a, j.Name)})
		}
	}
	w.banned = now
	return nil
}

// certs reports each certificate that expires within CertWarning, once a day.
func (w *Watcher) certs(ctx context.Context) {
	if w.Sites == nil {
		return
	}
	addr, names, err := w.Sites(ctx)
	if err != nil || addr == "" {
		return
	}
	now := w.now()
	for _, name := range names {
		notAfter, err := servedExpiry(ctx, addr, name)
		if err != nil {
			w.log().Debug("notify: certificate check failed", "name", name, "err", err)
			continue
		}
		if notAfter.Sub(now) > CertWarning {
			continue
		}
		if last, ok := w.certReported[name]; ok && now.Sub(last) < 24*time.Hour {
			continue
		}
		w.certReported[name] = now
		days := int(notAfter.Sub(now).Hours() / 24)
		on := ""
		if w.Edge != "" {
			on = " on " + w.Edge
		}
		w.Sender.Notify(ctx, Notification{Kind: KindCertExpiring, Title: "certificate expiring: " + name + on,
			Message: fmt.Sprintf("The certificate the web proxy%s serves for %s expires on %s, in %d day(s); it should have been renewed by now.",
				on, name, notAfter.UTC().Format("2006-01-02"), days)})
	}
}

// servedExpiry is the expiry of the certificate served at addr for name.
// The chain is not verified: an expiring or already broken certificate is
// exactly what is looked for, and nothing is sent over the connection.
func servedExpiry(ctx context.Context, addr, name string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{ServerName: name, InsecureSkipVerify: true}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return time.Time{}, err
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return time.Time{}, fmt.Errorf("%s served no certificate for %s", addr, name)
	}
	return certs[0].NotAfter, nil
}

func (w *Watcher) logins(ctx context.Context) error {
	now := w.now()
	if !w.lastBurst.IsZero() && now.Sub(w.lastBurst) < LoginBurstWindow {
		return nil
	}
	n, err := w.Store.CountAuditSince(ctx, now.Add(-LoginBurstWindow), w.LoginFailureKinds)
	if err != nil {
		return err
	}
	if n < LoginBurst {
		return nil
	}
	w.lastBurst = now
	w.Sender.Notify(ctx, Notification{Kind: KindLoginBurst, Title: "burst of failed logins",
		Message: fmt.Sprintf("%d failed dashboard logins in the last %d minutes; see Security → Audit log.", n, int(LoginBurstWindow.Minutes()))})
	return nil
}

// BannerJails reads the banned addresses of every jail from the ban tool.
func BannerJails(b *banner.Service) func(ctx context.Context) ([]Jail, error) {
	return func(ctx context.Context) ([]Jail, error) {
		st, err := b.Status(ctx)
		if err != nil {
			return nil, err
		}
		var out []Jail
		for _, j := range st.Jails {
			out = append(out, Jail{Name: j.Name, Banned: j.Banned})
		}
		return out, nil
	}
}

// upperFirst is s with its first letter in capitals.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
