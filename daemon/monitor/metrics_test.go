package monitor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Logins come from the audit log, background operations from the log hub
// (bans: bans_test.go, with a real fail2ban).
func TestLoginsOperationsAndBans(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, k := range []string{"LOGIN_SUCCESS", "LOGIN_2FA_SUCCESS", "LOGIN_FAILED", "LOGIN_FAILED", "LOGIN_2FA_FAILED", "LOGIN_RATE_LIMITED", "LOGOUT"} {
		st.InsertAudit(ctx, store.AuditEntry{CreatedAt: time.Now(), Kind: k})
	}
	hub := logstream.NewHub(nil)
	for _, ok := range []bool{true, false, true} {
		op, err := hub.Begin("install")
		if err != nil {
			t.Fatal(err)
		}
		op.Done(ok)
	}
	tokens := &monitor.Tokens{Store: st}
	tok, _, err := tokens.Create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Two edges' host parts: one as desired, one pending.
	since := time.Now()
	for _, p := range []store.HostPart{
		{Edge: "edge-a", Part: "caddy", Label: "Caddy config", InUse: true, DesiredHash: "a", AppliedHash: "a", Generation: 4, CheckedAt: since},
		{Edge: "edge-b", Part: "caddy", Label: "Caddy config", InUse: true, DesiredHash: "b", AppliedHash: "a", Generation: 3, PendingSince: &since, Error: "caddy refused", CheckedAt: since},
	} {
		if err := st.SaveHostPart(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	m := monitor.New(monitor.Options{Store: st, Tokens: tokens, Hub: hub, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "1.2.3"})
	srv := httptest.NewServer(m)
	defer srv.Close()
	code, fams := scrape(t, srv.URL, "Bearer "+tok)
	if code != 200 {
		t.Fatalf("scrape: %d", code)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"tunnelsvc_logins_total", map[string]string{"result": "success"}, 2},
		{"tunnelsvc_logins_total", map[string]string{"result": "failure"}, 4},
		{"tunnelsvc_audit_events_total", map[string]string{"kind": "LOGOUT"}, 1},
		{"tunnelsvc_operations_total", map[string]string{"operation": "install", "result": "success"}, 2},
		{"tunnelsvc_operations_total", map[string]string{"operation": "install", "result": "failure"}, 1},
		{"tunnelsvc_machines", map[string]string{"status": "online"}, 0},
		{"tunnelsvc_build_info", map[string]string{"version": "1.2.3"}, 1},
		{"tunnelsvc_host_part_applied_generation", map[string]string{"edge": "edge-a", "part": "caddy"}, 4},
		{"tunnelsvc_host_part_drifted", map[string]string{"edge": "edge-a", "part": "caddy"}, 0},
		{"tunnelsvc_host_part_applied_generation", map[string]string{"edge": "edge-b", "part": "caddy"}, 3},
		{"tunnelsvc_host_part_drifted", map[string]string{"edge": "edge-b", "part": "caddy"}, 1},
	} {
		if got, ok := value(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	free, _ := value(fams, "tunnelsvc_data_free_bytes", nil)
	size, _ := value(fams, "tunnelsvc_data_size_bytes", nil)
	full, ok := value(fams, "tunnelsvc_data_disk_full", nil)
	if free <= 0 || size < free || !ok || full != 0 {
		t.Errorf("data disk: free %v, size %v, full %v (present %v)", free, size, full, ok)
	}
	for _, name := range []string{"tunnelsvc_logins_total", "tunnelsvc_store_transaction_retries_total"} {
		if f := fams[name]; f == nil || f.GetType().String() != "COUNTER" {
			t.Errorf("%s is not a counter: %v", name, f)
		}
	}
	// One edge, nothing to conflict with: no write was run again.
	if got, ok := value(fams, "tunnelsvc_store_transaction_retries_total", nil); !ok || got != 0 {
		t.Errorf("tunnelsvc_store_transaction_retries_total = %v (present %v), want 0", got, ok)
	}
}

// TestTrafficSeriesSumEdges: two edges' frps each count their share of a
// tunnel's traffic; /metrics has one series for it, their sum (two series
// with the same labels would fail the scrape).
func TestTrafficSeriesSumEdges(t *testing.T) {
	ctx := context.Background()
	st, m, tun := monitor.StoreWithTunnel(t, "nas")
	first := func(prev store.TrafficSeen, in, out int64, day string) (int64, int64) { return in, out }
	for edge, in := range map[string]int64{"edge-a": 300, "edge-b": 200} {
		obs := []store.TrafficObservation{{Proxy: fmt.Sprintf("m%d.tunnel-%d", m.ID, tun.ID), MachineID: m.ID, TunnelID: tun.ID, DayIn: in, DayOut: in / 2, Conns: 1}}
		if err := st.ApplyTrafficOf(ctx, edge, time.Now().Unix()/60, time.Now().Format("2006-01-02"), obs, first); err != nil {
			t.Fatal(err)
		}
	}
	tokens := &monitor.Tokens{Store: st}
	tok, _, err := tokens.Create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(monitor.New(monitor.Options{Store: st, Tokens: tokens, Hub: logstream.NewHub(nil), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	code, fams := scrape(t, srv.URL, "Bearer "+tok)
	if code != 200 {
		t.Fatalf("scrape: %d", code)
	}
	labels := map[string]string{"machine": "nas", "tunnel": "db"}
	for name, want := range map[string]float64{"tunnelsvc_tunnel_received_bytes_total": 500, "tunnelsvc_tunnel_sent_bytes_total": 250, "tunnelsvc_tunnel_connections": 2} {
		if got, ok := value(fams, name, labels); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
		if n := len(fams[name].GetMetric()); n != 1 {
			t.Errorf("%s has %d series, want 1", name, n)
		}
	}
}
