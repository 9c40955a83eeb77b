// Package monitor is the daemon's observability: the Prometheus /metrics
// endpoint behind a bearer token, and the tunnel traffic collector that
// polls frps's dashboard API into SQLite.
package monitor

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// JailStat is one ban-tool jail's counts.
type JailStat struct {
	Name                         string
	CurrentlyBanned, TotalBanned int
}

// Options are what Metrics reads from. Traffic, Jails and Hub may be nil.
type Options struct {
	Store   *store.Store
	Tokens  *Tokens
	Traffic *Traffic
	// Jails reads the ban tool's jails (fail2ban); nil or an error leaves
	// the ban metrics out of that scrape.
	Jails func(ctx context.Context) ([]JailStat, error)
	Hub   *logstream.Hub
	Log   *slog.Logger
	// Version is the daemon's version (empty: the module's build version).
	Version string
}

// Metrics serves GET /metrics.
type Metrics struct {
	o       Options
	handler http.Handler
}

// scrapeTimeout bounds one scrape's reads (the store, frps, fail2ban).
const scrapeTimeout = 8 * time.Second

// New builds the registry: the daemon's own metrics, read fresh at every
// scrape, plus Go runtime, process and build information.
func New(o Options) *Metrics {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		&collector{o: o},
	)
	return &Metrics{o: o, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn), ErrorHandling: promhttp.ContinueOnError,
	})}
}

// ServeHTTP answers a scrape that carries the current bearer token, and
// 401 otherwise (no token, a wrong one, or none created yet).
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := auth.Bearer(r.Header)
	valid := false
	if tok != "" {
		var err error
		if valid, err = m.o.Tokens.Valid(r.Context(), tok); err != nil {
			m.o.Log.Error("metrics: token check failed", "err", err)
			http.Error(w, "could not check the token", http.StatusInternalServerError)
			return
		}
	}
	if !valid {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tunnelsvc metrics"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"a valid metrics bearer token is required"}` + "\n"))
		return
	}
	m.handler.ServeHTTP(w, r)
}

var (
	descMachines  = prometheus.NewDesc("tunnelsvc_machines", "Machines by status.", []string{"status"}, nil)
	descTunnels   = prometheus.NewDesc("tunnelsvc_tunnels", "Tunnels by kind and status.", []string{"kind", "status"}, nil)
	proxyLabels   = []string{"machine_id", "machine", "proxy", "tunnel"}
	descBytesIn   = prometheus.NewDesc("tunnelsvc_tunnel_received_bytes_total", "Bytes that users sent into a tunnel (towards the machine), counted by frps when each connection closes.", proxyLabels, nil)
	descBytesOut  = prometheus.NewDesc("tunnelsvc_tunnel_sent_bytes_total", "Bytes a tunnel sent back to users (from the machine), counted by frps when each connection closes.", proxyLabels, nil)
	descConns     = prometheus.NewDesc("tunnelsvc_tunnel_connections", "Connections open through a tunnel at the last poll of frps.", proxyLabels, nil)
	descFRPSUp    = prometheus.NewDesc("tunnelsvc_frps_up", "1 when the last poll of frps's dashboard API succeeded.", nil, nil)
	descLogins    = prometheus.NewDesc("tunnelsvc_logins_total", "Dashboard logins by result (from the audit log).", []string{"result"}, nil)
	descAudit     = prometheus.NewDesc("tunnelsvc_audit_events_total", "Audit log entries by kind.", []string{"kind"}, nil)
	descBanned    = prometheus.NewDesc("tunnelsvc_banned_addresses", "Addresses the ban tool bans now, per jail.", []string{"jail"}, nil)
	descBans      = prometheus.NewDesc("tunnelsvc_bans_total", "Bans per jail since the ban tool started.", []string{"jail"}, nil)
	descOps       = prometheus.NewDesc("tunnelsvc_operations_total", "Background operations (install, firewall, ban-tool setup) finished since the daemon started, by result.", []string{"operation", "result"}, nil)
	descBuildInfo = prometheus.NewDesc("tunnelsvc_build_info", "The daemon's version; always 1.", []string{"version", "goversion"}, nil)
	descDataFree  = prometheus.NewDesc("tunnelsvc_data_free_bytes", "Bytes the daemon may still write on the data directory's file system (as root, ext4's reserve for root included).", nil, nil)
	descDataSize  = prometheus.NewDesc("tunnelsvc_data_size_bytes", "Size of the data directory's file system in bytes.", nil, nil)
	descDataFull  = prometheus.NewDesc("tunnelsvc_data_disk_full", "1 while writes to the data directory fail for lack of space (what /healthz answers 503 for).", nil, nil)
	descHostGen   = prometheus.NewDesc("tunnelsvc_host_part_applied_generation", "How many configurations an edge applied to a part of its own host (frps, visitorhop, caddy, publish, firewall) since it started keeping it.", []string{"edge", "part"}, nil)
	descTxRetries = prometheus.NewDesc("tunnelsvc_store_transaction_retries_total", "Write transactions run again since the daemon started, after a conflict with another edge's writes (PostgreSQL's serialization failures and deadlocks).", nil, nil)
	descHostDrift = prometheus.NewDesc("tunnelsvc_host_part_drifted", "1 while a part of an edge's own host is not as the database says it should be (an apply failed, or is due).", []string{"edge", "part"}, nil)
)

// Audit kinds that count as logins and failed logins.
var (
	loginSuccessKinds = []string{"LOGIN_SUCCESS", "LOGIN_2FA_SUCCESS"}
	loginFailureKinds = []string{"LOGIN_FAILED", "LOGIN_2FA_FAILED", "LOGIN_RATE_LIMITED"}
)

type collector struct{ o Options }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMachines, descTunnels, descBytesIn, descBytesOut, descConns, descFRPSUp,
		descLogins, descAudit, descBanned, descBans, descOps, descBuildInfo, descDataFree, descDataSize, descDataFull, descHostGen, descHostDrift, descTxRetries} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	c.buildInfo(ch)
	c.space(ch)
	ch <- prometheus.MustNewConstMetric(descTxRetries, prometheus.CounterValue, float64(c.o.Store.TxRetries()))
	if c.o.Traffic != nil {
		// A scrape shows what frps counts now, not up to a minute ago.
		if err := c.o.Traffic.Poll(ctx); err != nil {
			c.o.Log.Debug("metrics: frps poll failed", "err", err)
		}
		up := 0.0
		if c.o.Traffic.Up() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descFRPSUp, prometheus.GaugeValue, up)
	}
	if err := c.inventory(ctx, ch); err != nil {
		ch <- prometheus.NewInvalidMetric(descMachines, err)
	}
	if err := c.audit(ctx, ch); err != nil {
		ch <- prometheus.NewInvalidMetric(descAudit, err)
	}
	if err := c.hostParts(ctx, ch); err != nil {
		ch <- prometheus.NewInvalidMetric(descHostDrift, err)
	}
	if c.o.Jails != nil {
		if jails, err := c.o.Jails(ctx); err == nil {
			for _, j := range jails {
				ch <- prometheus.MustNewConstMetric(descBanned, prometheus.GaugeValue, float64(j.CurrentlyBanned), j.Name)
				ch <- prometheus.MustNewConstMetric(descBans, prometheus.CounterValue, float64(j.TotalBanned), j.Name)
			}
		} else {
			c.o.Log.Debug("metrics: ban tool status unavailable", "err", err)
		}
	}
	if c.o.Hub != nil {
		for k, n := range c.o.Hub.Outcomes() {
			result := "failure"
			if k.OK {
				result = "success"
			}
			ch <- prometheus.MustNewConstMetric(descOps, prometheus.CounterValue, float64(n), k.Name, result)
		}
	}
}

// hostParts reports every edge's parts of its own host, as each recorded
// them (hostsync).
func (c *collector) hostParts(ctx context.Context, ch chan<- prometheus.Metric) error {
	parts, err := c.o.Store.HostParts(ctx)
	if err != nil {
		return err
	}
	for _, p := range parts {
		drift := 0.0
		if p.Drifted() {
			drift = 1
		}
		ch <- prometheus.MustNewConstMetric(descHostGen, prometheus.GaugeValue, float64(p.Generation), p.Edge, p.Part)
		ch <- prometheus.MustNewConstMetric(descHostDrift, prometheus.GaugeValue, drift, p.Edge, p.Part)
	}
	return nil
}

func (c *collector) buildInfo(ch chan<- prometheus.Metric) {
	version, gov := c.o.Version, runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok && version == "" {
		version = bi.Main.Version
	}
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, version, gov)
}

// space reports the data directory's file system; a full disk still
// answers every metric read from the database.
func (c *collector) space(ch chan<- prometheus.Metric) {
	sp, err := c.o.Store.Space()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descDataFree, err)
		return
	}
	full := 0.0
	if sp.Full {
		full = 1
	}
	ch <- prometheus.MustNewConstMetric(descDataFree, prometheus.GaugeValue, float64(sp.Free))
	ch <- prometheus.MustNewConstMetric(descDataSize, prometheus.GaugeValue, float64(sp.Size))
	ch <- prometheus.MustNewConstMetric(descDataFull, prometheus.GaugeValue, full)
}

func (c *collector) inventory(ctx context.Context, ch chan<- prometheus.Metric) error {
	ms, err := c.o.Store.ListMachines(ctx)
	if err != nil {
		return err
	}
	byStatus := map[string]int{"pending": 0, "online": 0, "offline": 0}
	names := map[int64]string{}
	for _, m := range ms {
		byStatus[m.Status]++
		names[m.ID] = m.Name
	}
	for s, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(descMachines, prometheus.GaugeValue, float64(n), s)
	}
	ts, err := c.o.Store.ListTunnels(ctx, 0)
	if err != nil {
		return err
	}
	type ks struct{ kind, status string }
	tunnels := map[ks]int{}
	tunnelNames := map[int64]string{}
	for _, t := range ts {
		tunnels[ks{t.Kind, t.Status}]++
		tunnelNames[t.ID] = t.Name
	}
	for k, n := range tunnels {
		ch <- prometheus.MustNewConstMetric(descTunnels, prometheus.GaugeValue, float64(n), k.kind, k.status)
	}
	totals, err := c.o.Store.TrafficTotals(ctx)
	if err != nil {
		return err
	}
	// One series per proxy: on a cluster each edge's frps counts its own
	// share of a proxy's traffic, and the series is their sum.
	type series struct {
		labels         [4]string
		in, out, conns int64
	}
	var order []string
	sum := map[string]*series{}
	for _, t := range totals {
		name, ok := names[t.MachineID]
		if !ok {
			continue // deleted machine: its series ends
		}
		_, short, _ := strings.Cut(t.Proxy, ".")
		tunnel := short
		if t.TunnelID != 0 {
			if tunnel, ok = tunnelNames[t.TunnelID]; !ok {
				continue // deleted tunnel
			}
		}
		key := strconv.FormatInt(t.MachineID, 10) + "." + short
		s := sum[key]
		if s == nil {
			s = &series{labels: [4]string{strconv.FormatInt(t.MachineID, 10), name, short, tunnel}}
			sum[key] = s
			order = append(order, key)
		}
		s.in, s.out, s.conns = s.in+t.In, s.out+t.Out, s.conns+t.Conns
	}
	for _, key := range order {
		s := sum[key]
		lv := s.labels[:]
		ch <- prometheus.MustNewConstMetric(descBytesIn, prometheus.CounterValue, float64(s.in), lv...)
		ch <- prometheus.MustNewConstMetric(descBytesOut, prometheus.CounterValue, float64(s.out), lv...)
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(s.conns), lv...)
	}
	return nil
}

func (c *collector) audit(ctx context.Context, ch chan<- prometheus.Metric) error {
	counts, err := c.o.Store.CountAuditByKind(ctx)
	if err != nil {
		return err
	}
	sum := func(kinds []string) (n int64) {
		for _, k := range kinds {
			n += counts[k]
		}
		return n
	}
	ch <- prometheus.MustNewConstMetric(descLogins, prometheus.CounterValue, float64(sum(loginSuccessKinds)), "success")
	ch <- prometheus.MustNewConstMetric(descLogins, prometheus.CounterValue, float64(sum(loginFailureKinds)), "failure")
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descAudit, prometheus.CounterValue, float64(n), k)
	}
	return nil
}

// BannerJails reads the jails' ban counts from the ban tool.
func BannerJails(b *banner.Service) func(ctx context.Context) ([]JailStat, error) {
	return func(ctx context.Context) ([]JailStat, error) {
		st, err := b.Status(ctx)
		if err != nil {
			return nil, err
		}
		var out []JailStat
		for _, j := range st.Jails {
			out = append(out, JailStat{Name: j.Name, CurrentlyBanned: j.CurrentlyBanned, TotalBanned: j.TotalBanned})
		}
		return out, nil
	}
}
