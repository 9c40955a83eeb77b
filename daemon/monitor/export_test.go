package monitor

import (
	"context"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// StoreWithTunnel is a SQLite store in a temporary directory holding one
// machine, named as given, with one TCP tunnel "db"; both test packages of
// monitor start from it.
func StoreWithTunnel(t *testing.T, machine string) (*store.Store, store.Machine, store.Tunnel) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ports := store.PortRange{Lo: 20000, Hi: 20100}
	m, err := st.RegisterMachine(ctx, store.NewMachine{Name: machine, Username: "pi", SecretHash: "s", AgentTokenHash: "t",
		AgentLocalPort: 7390, SSHLocalPort: 22, Seal: func(int64) (string, error) { return "x", nil }, Now: time.Now(), Ports: ports})
	if err != nil {
		t.Fatal(err)
	}
	tun, err := st.InsertTunnel(ctx, store.Tunnel{MachineID: m.ID, Name: "db", Kind: "tcp", LocalPort: 5432}, ports, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st, m, tun
}
