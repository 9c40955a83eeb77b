package systemtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// checkMetrics: frps, run by the packaged unit (dynamic user, sandbox),
// serves its dashboard API on loopback only, and the daemon reads it:
// /metrics, scraped on the VPS with a token made through the API, shows
// frps up, the machine online and its proxies.
func checkMetrics(t *testing.T, h *testbed.Host, v *vps) {
	t.Helper()
	if ls := strings.TrimSpace(h.Must("ss", "-ltnH", "sport = :7383")); !strings.Contains(ls, "127.0.0.1:7383") || strings.Contains(ls, "0.0.0.0:7383") || strings.Contains(ls, "*:7383") {
		t.Fatalf("frps's dashboard API listens on %q, want 127.0.0.1:7383 only", ls)
	}
	tok, _ := v.data("POST", "/api/monitoring/metrics-token", "", 200)["token"].(string)
	if out, _ := h.Exec("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:7380/metrics"); out != "401" {
		t.Fatalf("/metrics without the token: %q, want 401", out)
	}
	var metrics string
	testutil.Eventually(t, 20*time.Second, "frps's figures in /metrics", func() error {
		out, err := h.Exec("curl", "-fsS", "-H", "Authorization: Bearer "+tok, "http://127.0.0.1:7380/metrics")
		if err != nil {
			return err
		}
		metrics = out
		for _, want := range []string{"tunnelsvc_frps_up 1\n", `tunnelsvc_machines{status="online"} 1` + "\n", `proxy="ssh"`} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in /metrics", want)
			}
		}
		return nil
	})
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "tunnelsvc_frps_up") || strings.HasPrefix(l, "tunnelsvc_tunnel_") {
			t.Log(l)
		}
	}
}
