package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// FRPS reads frps's dashboard API (webServer in server.toml), which frps
// serves on loopback with a password only the daemon knows.
type FRPS struct {
	// Addr is host:port of the dashboard API.
	Addr           string
	User, Password string
	// Client defaults to one with a 10 s timeout.
	Client *http.Client
}

// ProxyStats is one proxy as frps's GET /api/proxy/tcp reports it
// (frp v0.71.0 server/http/model/types.go ProxyStatsInfo). Traffic counters
// count today only (frps's local date) and restart with frps; frps adds a
// connection's bytes when the connection closes.
type ProxyStats struct {
	Name            string `json:"name"`
	TodayTrafficIn  int64  `json:"todayTrafficIn"`
	TodayTrafficOut int64  `json:"todayTrafficOut"`
	CurConns        int64  `json:"curConns"`
	Status          string `json:"status"`
}

// Proxies returns every tcp proxy frps knows, online or not.
func (f *FRPS) Proxies(ctx context.Context) ([]ProxyStats, error) {
	var out struct {
		Proxies []ProxyStats `json:"proxies"`
	}
	err := f.get(ctx, "/api/proxy/tcp", &out)
	return out.Proxies, err
}

// Version is the version frps answers with (GET /api/serverinfo, in
// frps's dashboard API since before v0.65.0): the running tunnel server's,
// which a package upgrade may have left behind until frps restarts.
func (f *FRPS) Version(ctx context.Context) (string, error) {
	var out struct {
		Version string `json:"version"`
	}
	if err := f.get(ctx, "/api/serverinfo", &out); err != nil {
		return "", err
	}
	if out.Version == "" {
		return "", errors.New("frps dashboard API: /api/serverinfo names no version")
	}
	return out.Version, nil
}

// get reads path of the dashboard API into out.
func (f *FRPS) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.Addr+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(f.User, f.Password)
	c := f.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("frps dashboard API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("frps dashboard API: %w", err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %s", errNoRoute, path)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("frps dashboard API answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("frps dashboard API: unreadable answer: %w", err)
	}
	return nil
}

// errNoRoute: the dashboard API has no such path (an older frps).
var errNoRoute = errors.New("frps dashboard API: no such path")

// Connected returns the machines whose tunnel client is connected to this
// frps now: the clients it lists online (GET /api/clients?status=online,
// one short entry a client, since frp v0.71.0). An older frps is asked
// for its proxies instead (three entries a machine, each longer): the
// machines with an online ssh or agent proxy (every machine's client
// opens both).
func (f *FRPS) Connected(ctx context.Context) (map[int64]bool, error) {
	var cs []struct {
		User   string `json:"user"`
		Online bool   `json:"online"`
	}
	err := f.get(ctx, "/api/clients?status=online", &cs)
	if errors.Is(err, errNoRoute) {
		return f.connectedProxies(ctx)
	}
	if err != nil {
		return nil, err
	}
	out := map[int64]bool{}
	for _, c := range cs {
		if m, ok := machineOfUser(c.User); ok && c.Online {
			out[m] = true
		}
	}
	return out, nil
}

// connectedProxies is Connected from frps's proxies.
func (f *FRPS) connectedProxies(ctx context.Context) (map[int64]bool, error) {
	ps, err := f.Proxies(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int64]bool{}
	for _, p := range ps {
		if m, t, ok := parseProxy(p.Name); ok && t == 0 && p.Status == "online" {
			out[m] = true
		}
	}
	return out, nil
}

// machineOfUser is the machine of frp user name "m<id>".
func machineOfUser(user string) (int64, bool) {
	if !strings.HasPrefix(user, "m") {
		return 0, false
	}
	m, err := strconv.ParseInt(user[1:], 10, 64)
	return m, err == nil && m > 0
}

// parseProxy splits frps's proxy name ("m7.ssh", "m7.tunnel-3") into the
// machine and tunnel ids (0 for a machine's ssh and agent proxies); ok is
// false for names the daemon did not give.
func parseProxy(name string) (machineID, tunnelID int64, ok bool) {
	user, short, found := strings.Cut(name, ".")
	m, ok := machineOfUser(user)
	if !found || !ok {
		return 0, 0, false
	}
	if short == "ssh" || short == "agent" {
		return m, 0, true
	}
	t, err := strconv.ParseInt(strings.TrimPrefix(short, "tunnel-"), 10, 64)
	if err != nil || !strings.HasPrefix(short, "tunnel-") || t <= 0 {
		return 0, 0, false
	}
	return m, t, true
}

// passwordKey is the settings key of frps's dashboard password (sealed).
const passwordKey = "frps_dashboard_password"

var passwordAAD = []byte("frps-dashboard-password")

// DashboardPassword returns the password of frps's dashboard API,
// generating it at first use. It is kept sealed, like other secrets, so a
// copied database alone does not give it away.
func DashboardPassword(ctx context.Context, st *store.Store, sealer *seal.Sealer) (string, error) {
	for range 2 {
		v, err := st.GetSetting(ctx, passwordKey)
		if err == nil {
			p, err := sealer.Open(v, passwordAAD)
			if err != nil {
				return "", fmt.Errorf("frps dashboard password: %w", err)
			}
			return string(p), nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return "", err
		}
		p, err := auth.NewToken()
		if err != nil {
			return "", err
		}
		// The first writer wins; a concurrent caller reads its password.
		if _, err := st.SetSettingIfAbsent(ctx, passwordKey, sealer.Seal([]byte(p), passwordAAD)); err != nil {
			return "", err
		}
	}
	return "", errors.New("frps dashboard password: could not be stored")
}
