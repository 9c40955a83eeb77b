package store

import (
	"context"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// fill writes a row or more into every table through the store's own
// calls, as a daemon in use would.
func fill(t *testing.T, s *Store) (Machine, Tunnel) {
	t.Helper()
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_123).UTC()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetSetting(ctx, "password_hash", "$argon2id$v=19$x\nwith a newline, 'quotes' and ünïcode"))
	since := now.Add(-time.Minute)
	must(s.SaveHostPart(ctx, HostPart{Edge: "edge-a", Part: "caddy", Label: "Caddy config", InUse: true, DesiredHash: "b", AppliedHash: "a",
		Generation: 2, PendingSince: &since, Error: "caddy refused", CheckedAt: now}))
	if _, err := s.CreateRollout(ctx, Rollout{Target: "2.0.0", BaseURL: "https://vps.example", Batch: 5, MachineIDs: []int64{1, 2}, StartedAt: now}); err != nil {
		t.Fatal(err)
	}
	must(s.CreateSession(ctx, Session{TokenHash: "sess", CreatedAt: now, ExpiresAt: now.Add(time.Hour), ClientAddr: "192.0.2.1"}))
	must(s.InsertAudit(ctx, AuditEntry{CreatedAt: now, Kind: "LOGIN_OK", ClientAddr: "192.0.2.1", Detail: "d"}))
	if _, err := s.AddAggregatedAudit(ctx, AuditEntry{CreatedAt: now, Kind: "LOGIN_RATE_LIMITED", ClientAddr: "192.0.2.9"}); err != nil {
		t.Fatal(err)
	}
	must(s.PutTOTPEnrollment(ctx, TOTPEnrollment{DeviceID: "dev2", SecretSealed: "v1:enrolling", ExpiresAt: now.Add(time.Minute)}))
	must(s.PutTOTPEnrollment(ctx, TOTPEnrollment{DeviceID: "dev1", SecretSealed: "v1:sealed", ExpiresAt: now.Add(time.Minute)}))
	if _, err := s.ConfirmTOTPDevice(ctx, TOTPDevice{ID: "dev1", Name: "phone", SecretSealed: "v1:sealed", CreatedAt: now, LastStep: -1},
		[]BackupCode{{CodeHash: "h1", Lookup: "ab"}, {CodeHash: "h2"}}); err != nil {
		t.Fatal(err)
	}
	must(s.PutTOTPEnrollment(ctx, TOTPEnrollment{DeviceID: "dev2", SecretSealed: "v1:other", ExpiresAt: now.Add(time.Minute)}))
	must(s.CreateLoginPending(ctx, "pending", "192.0.2.1", now, now.Add(time.Minute)))
	if _, err := s.InsertSSHKey(ctx, SSHKey{ID: "k1", Name: "default", Type: "ed25519", PublicKey: "ssh-ed25519 AAA", Fingerprint: "SHA256:x",
		PrivateSealed: "v1:private", CreatedAt: now}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertBootstrapToken(ctx, "tok", "Bob's laptop", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertAPIToken(ctx, APIToken{Name: "ci's token", Scope: "write", TokenHash: "h1", CreatedAt: now, ExpiresAt: now.AddDate(0, 0, 30)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertPasskey(ctx, Passkey{ID: "pk-1", Name: "laptop", CredentialID: "Y3JlZA", Credential: `{"id":"Y3JlZA"}`, CreatedAt: now}, nil); err != nil {
		t.Fatal(err)
	}
	must(s.PutCeremony(ctx, "c1", "register", `{"challenge":"x"}`, now.Add(time.Hour), now))
	must(s.PutOIDCFlow(ctx, OIDCFlow{StateHash: "sh1", Nonce: "n", Verifier: "v", Purpose: "dashboard", ReturnTo: "/#/overview", ExpiresAt: now.Add(time.Hour)}, now))
	if _, err := s.InsertBootstrapToken(ctx, "tok2", "", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	m, err := s.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "sh", AgentTokenHash: "ah", SSHKeyID: "k1",
		Seal: func(int64) (string, error) { return "v1:secret", nil }, Now: now, TokenHash: "tok", ConsumeToken: true,
		Ports: PortRange{Lo: 20000, Hi: 20100}, AgentLocalPort: 7000, SSHLocalPort: 22})
	must(err)
	must(s.SetConfigPush(ctx, m.ID, ConfigPush{OK: true, Message: "ok", At: now}))
	tu, err := s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: "web", Kind: "http", LocalPort: 8080, Subdomain: "web", Public: true},
		PortRange{Lo: 20000, Hi: 20100}, now)
	must(err)
	must(s.SetTunnelProbe(ctx, TunnelProbe{TunnelID: tu.ID, State: "up", HTTPStatus: 200, CertValid: true, CertExpiresAt: now, CheckedAt: now}))
	must(s.UpdateTunnelParts(ctx, tu, &TunnelAccess{TunnelID: tu.ID, Access: "password", PasswordHash: "$argon2id$pw", AllowIPs: []string{"192.0.2.0/24"}},
		nil, nil, PortRange{Lo: 20000, Hi: 20100}))
	_, err = s.SetTargets(ctx, tu.ID, []TargetSpec{{MachineID: m.ID, LocalPort: 8081}}, PortRange{Lo: 20000, Hi: 20100})
	must(err)
	must(s.SetTunnelDomains(ctx, tu.ID, []string{"app.example.org"}))
	must(s.InsertStaleTokenAttempt(ctx, StaleTokenAttempt{CreatedAt: now, ClientAddr: "198.51.100.1", Reason: "unknown token"}))
	must(s.InsertEvent(ctx, Event{CreatedAt: now, Source: "machine", Kind: "machine_registered", MachineID: m.ID, Message: "nas joined"}))
	must(s.ApplyTraffic(ctx, now.Unix()/60, "2027-01-15", []TrafficObservation{{Proxy: "m1.ssh", MachineID: m.ID, DayIn: 10, DayOut: 20, Conns: 1}},
		func(prev TrafficSeen, in, out int64, day string) (int64, int64) { return in, out }))
	e, err := s.EdgeHeartbeat(ctx, "edge-a", "203.0.113.1", "1.0", 7000, now)
	must(err)
	_, err = s.InsertEdgeToken(ctx, "edge-tok", now, now.Add(time.Hour))
	must(err)
	must(s.SetMachineEdgeStatus(ctx, m.ID, e.ID, "online", now))
	_, err = s.LeaseFence(ctx, "notify", "edge-a", time.Minute, now)
	must(err)
	must(s.PutGateToken(ctx, "gate-session", GateSession, tu.ID, now.Add(time.Hour), GateWho{User: "ana", Email: "ana@example.com"}))
	_, err = s.InsertBypassToken(ctx, BypassToken{TunnelID: tu.ID, Name: "ios-app", Hash: strings.Repeat("ab", 32), CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
	must(err)
	_, err = s.InsertAuthFailure(ctx, "edge-a", "192.0.2.7/32", now)
	must(err)
	speed, err := s.StartSpeedTest(ctx, SpeedTest{MachineID: m.ID, Edge: "edge-a", Phase: "download", Seconds: 10, StartedAt: now})
	must(err)
	kbps := int64(48_123)
	must(s.FinishSpeedTest(ctx, SpeedTest{ID: speed, State: SpeedTestFailed, FinishedAt: &now, DownloadKbps: &kbps, Error: "the upload broke off"}))
	m, err = s.GetMachine(ctx, m.ID)
	must(err)
	return m, tu
}

// TestCopyTablesAreTheSchema: Copy moves every table the migrations make.
func TestCopyTablesAreTheSchema(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, t.TempDir())
	desc, err := describeSchema(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, l := range strings.Split(desc, "\n") {
		if name, ok := strings.CutSuffix(l, ": table"); ok {
			tables = append(tables, name)
		}
	}
	have := append([]string(nil), copyTables...)
	sort.Strings(have)
	if !reflect.DeepEqual(have, tables) {
		t.Fatalf("Copy's tables %v, the schema's %v", have, tables)
	}
	for _, table := range copyTables {
		if n := count(t, s, table); n != 0 {
			t.Fatalf("%s has %d rows in a new database", table, n)
		}
	}
}

// TestCopyBothWays: an install in use, copied from SQLite to PostgreSQL
// and back to a new SQLite, reads the same everywhere, keeps its ids,
// hands out new ids after the copied ones, and a copy into a database
// that holds anything is refused.
func TestCopyBothWays(t *testing.T) {
	ctx := context.Background()
	lite := openAt(t, t.TempDir())
	m, tu := fill(t, lite)
	pg, err := OpenDatabase(ctx, t.TempDir(), testutil.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()

	rep, err := Copy(ctx, lite, pg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.From != "sqlite" || rep.To != "postgres" || len(rep.Tables) != len(copyTables) {
		t.Fatalf("report %+v", rep)
	}
	for _, tc := range rep.Tables {
		if tc.Rows == 0 || len(tc.Hash) != 64 {
			t.Errorf("table %s: %d rows, hash %q; fill writes every table", tc.Table, tc.Rows, tc.Hash)
		}
	}
	for _, st := range []*Store{lite, pg} {
		got, err := st.GetMachine(ctx, m.ID)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("%s: machine %+v, %v; want %+v", st.Engine(), got, err, m)
		}
		ts, err := st.ListTunnels(ctx, m.ID)
		if err != nil || len(ts) != 1 || ts[0] != tu {
			t.Fatalf("%s: tunnels %+v, %v; want %+v", st.Engine(), ts, err, tu)
		}
		key, err := st.DefaultSSHKey(ctx)
		if err != nil || key.PrivateSealed != "v1:private" || key.MachineCount != 1 {
			t.Fatalf("%s: key %+v, %v", st.Engine(), key, err)
		}
	}
	// New rows on PostgreSQL take ids after the copied ones.
	id, err := pg.InsertBootstrapToken(ctx, "tok3", "", time.Now(), time.Now().Add(time.Hour))
	if err != nil || id != 3 {
		t.Fatalf("a new token on the copy: id %d, %v; want 3", id, err)
	}

	_, err = Copy(ctx, lite, pg)
	if err == nil || err.Error() != "the target database is not empty: table settings has 1 rows" {
		t.Fatalf("copy into a non-empty database: %v", err)
	}

	back := openAt(t, t.TempDir())
	rep2, err := Copy(ctx, pg, back)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range rep2.Tables {
		if tc.Table == "bootstrap_tokens" {
			continue // one more since
		}
		if tc != rep.Tables[i] {
			t.Errorf("back on SQLite: %+v, first copy %+v", tc, rep.Tables[i])
		}
	}
	if id, err := back.InsertBootstrapToken(ctx, "tok4", "", time.Now(), time.Now().Add(time.Hour)); err != nil || id != 4 {
		t.Fatalf("a new token on the copy back: id %d, %v; want 4", id, err)
	}
}
