// Package publish makes public tcp and udp tunnels reachable from outside while
// frps binds every tunnel listener on loopback.
//
// frps has a single proxyBindAddr for all proxies, and machines' SSH and
// agent ports and HTTP tunnels' back ends must never listen outside (the
// daemon itself reaches agents on 127.0.0.1). So frps always binds
// 127.0.0.1, and a public tunnel's port is published by the kernel: our own
// nftables table `ip tunnelsvc_publish` DNATs TCP or UDP to that port, arriving on
// the bind address (or any local address when bind_ip is empty), to
// 127.0.0.1. Linux routes such packets to loopback only with
// net.ipv4.conf.all.route_localnet=1, which would also let a neighbour on the
// link send packets to any loopback service; the same table therefore drops
// every packet to 127.0.0.0/8 that arrives from outside and was not DNATed
// by it, and the sysctl is turned on only while a public tunnel exists (and
// off again by us when the last one goes, if we turned it on). IPv6 cannot
// be forwarded to loopback at all, so public tunnels are published over
// IPv4. The table is independent of the firewall mode: it forwards, it does
// not filter anything but the martian loopback packets.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Table is our nftables table for publishing; no other table is touched.
const Table = "ip tunnelsvc_publish"

// Sysctl is the kernel setting DNAT to loopback needs.
const Sysctl = "net.ipv4.conf.all.route_localnet"

// markerKey remembers that we turned Sysctl on, so we turn it off again
// only then.
const markerKey = "publish.route_localnet_set"

// Params are what the table is rendered from.
type Params struct {
	// BindIP, when set, is the only address public tunnels are published
	// on; empty means every local address.
	BindIP string
	// Ports are the public tcp tunnels' ports, UDPPorts the public udp
	// tunnels' (frps listens on 127.0.0.1 for both).
	Ports    []int
	UDPPorts []int
}

// ErrIPv6Bind refuses to publish on an IPv6 bind address (a bad setting,
// not a failure).
var ErrIPv6Bind = errors.New("public tcp and udp tunnels are published over IPv4 only (frps listens on 127.0.0.1, and Linux cannot forward IPv6 to loopback): set an IPv4 bind_ip or clear it, or make those tunnels private")

// Render returns the nft script that replaces our table in one
// transaction. It is an error to publish with an IPv6 bind address.
func Render(p Params) (string, error) {
	ports, err := portSet(p.Ports)
	if err != nil {
		return "", err
	}
	udp, err := portSet(p.UDPPorts)
	if err != nil {
		return "", err
	}
	match, out := `fib daddr type local`, `ip daddr != 127.0.0.0/8 fib daddr type local`
	if p.BindIP != "" {
		a, err := netip.ParseAddr(p.BindIP)
		if err != nil || a.Zone() != "" {
			return "", fmt.Errorf("bind ip %q is not an IP address", p.BindIP)
		}
		if a = a.Unmap(); !a.Is4() {
			return "", ErrIPv6Bind
		}
		match, out = "ip daddr "+a.String(), "ip daddr "+a.String()
	}
	var b strings.Builder
	b.WriteString(`# Managed by tunnelsvc: publishes public tunnels, whose frps listeners are
# on 127.0.0.1 only, by DNAT. Rewritten on every tunnel or bind_ip change.
# Undo by hand: nft delete table ip tunnelsvc_publish
table ip tunnelsvc_publish
delete table ip tunnelsvc_publish
table ip tunnelsvc_publish {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
`)
	each := func(f string, a ...any) {
		for _, pr := range []struct{ proto, set, what string }{{"tcp", ports, "public tunnels"}, {"udp", udp, "public udp tunnels"}} {
			if pr.set != "" {
				fmt.Fprintf(&b, f, append(a, pr.proto, pr.set, pr.what)...)
			}
		}
	}
	each("\t\tiif != \"lo\" %s %s dport %s dnat to 127.0.0.1 comment \"%s\"\n", match)
	b.WriteString(`	}
	chain output {
		type nat hook output priority -100; policy accept;
`)
	each("\t\t%s %s dport %s dnat to 127.0.0.1 comment \"%s, from this box\"\n", out)
	b.WriteString(`	}
	chain guard {
		type filter hook input priority filter - 10; policy accept;
		iif != "lo" ip daddr 127.0.0.0/8 ct status & dnat == 0 drop comment "route_localnet: only our DNAT reaches loopback"
	}
}
`)
	return b.String(), nil
}

// portSet is ports as an nft set ("{ 1, 2 }"), sorted, each once; "" for
// none.
func portSet(ports []int) (string, error) {
	ps := slices.Clone(ports)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	s := make([]string, len(ps))
	for i, n := range ps {
		if n < 1 || n > 65535 {
			return "", fmt.Errorf("public tunnel port %d is not a port (1-65535)", n)
		}
		s[i] = strconv.Itoa(n)
	}
	if len(s) == 0 {
		return "", nil
	}
	return "{ " + strings.Join(s, ", ") + " }", nil
}

const removeScript = "table ip tunnelsvc_publish\ndelete table ip tunnelsvc_publish\n"

// ApplyError is nft or sysctl refusing; Msg carries the tool's words.
type ApplyError struct{ Msg string }

func (e *ApplyError) Error() string { return e.Msg }

// Options configure a Service.
type Options struct {
	Store *store.Store
	Run   cmdrun.Runner
	// Params returns the current bind address and public tunnel ports.
	Params func(ctx context.Context) (Params, error)
	// RulesetPath keeps the applied script (/etc/tunnelsvc/publish.nft
	// under --system-root).
	RulesetPath string
	Log         *slog.Logger
}

// Service keeps the table in line with the tunnels and bind_ip.
type Service struct {
	o  Options
	mu sync.Mutex
}

// New builds a Service.
func New(o Options) *Service {
	if o.Run == nil {
		o.Run = cmdrun.Exec{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Service{o: o}
}

// Desired is the table Reconcile would apply now; inUse is false while no
// tunnel is published (Reconcile then removes the table).
func (s *Service) Desired(ctx context.Context) ([]byte, bool, error) {
	p, err := s.o.Params(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("reading public tunnels: %w", err)
	}
	if len(p.Ports) == 0 && len(p.UDPPorts) == 0 {
		return nil, false, nil
	}
	script, err := Render(p)
	return []byte(script), err == nil, err
}

// Reconcile applies the table for the current public tunnels (checked with
// `nft -c` first; a refused or failed script leaves the previous table and
// file in place), then turns route_localnet on. With no public tunnel it
// removes the table and turns route_localnet off if we turned it on.
func (s *Service) Reconcile(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.o.Params(ctx)
	if err != nil {
		return fmt.Errorf("reading public tunnels: %w", err)
	}
	if len(p.Ports) == 0 && len(p.UDPPorts) == 0 {
		return s.remove(ctx)
	}
	script, err := Render(p)
	if errors.Is(err, ErrIPv6Bind) {
		return err
	}
	if err != nil {
		return &ApplyError{Msg: err.Error()}
	}
	old, oldErr := os.ReadFile(s.o.RulesetPath)
	if string(old) != script {
		if err := s.nftCheck(ctx, script); err != nil {
			return err
		}
		if err := atomicfile.Write(s.o.RulesetPath, []byte(script), 0o600); err != nil {
			return err
		}
	}
	// Apply even when the file is unchanged: the table does not survive a
	// reboot and the daemon reconciles at start.
	if res := s.o.Run.Run(ctx, "nft", "-f", s.o.RulesetPath); res.Err != nil {
		if string(old) != script {
			if oldErr == nil {
				atomicfile.Write(s.o.RulesetPath, old, 0o600)
			} else {
				os.Remove(s.o.RulesetPath)
			}
		}
		return toolError("nft -f failed: ", res)
	}
	// The guard is loaded: now loopback may be routed to.
	cur, err := s.sysctl(ctx)
	if err != nil {
		return err
	}
	if cur != "1" {
		if res := s.o.Run.Run(ctx, "sysctl", "-q", "-w", Sysctl+"=1"); res.Err != nil {
			return toolError("sysctl could not turn on "+Sysctl+" (public tunnels stay unreachable): ", res)
		}
		if err := s.o.Store.SetSetting(ctx, markerKey, "1"); err != nil {
			return err
		}
		s.o.Log.Info("publish: turned on " + Sysctl + " for public tunnels")
	}
	return nil
}

func (s *Service) remove(ctx context.Context) error {
	marker, err := s.o.Store.GetSetting(ctx, markerKey)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if marker == "1" {
		if res := s.o.Run.Run(ctx, "sysctl", "-q", "-w", Sysctl+"=0"); res.Err != nil {
			return toolError("sysctl could not turn off "+Sysctl+": ", res)
		}
		if err := s.o.Store.SetSetting(ctx, markerKey, ""); err != nil {
			return err
		}
		s.o.Log.Info("publish: no public tunnel left; turned " + Sysctl + " off again")
	}
	if _, err := os.Stat(s.o.RulesetPath); err == nil || marker == "1" {
		if err := s.nftScript(ctx, removeScript, false); err != nil {
			return err
		}
		os.Remove(s.o.RulesetPath)
	}
	return nil
}

func (s *Service) sysctl(ctx context.Context) (string, error) {
	res := s.o.Run.Run(ctx, "sysctl", "-n", Sysctl)
	if res.Err != nil {
		return "", toolError("sysctl could not read "+Sysctl+": ", res)
	}
	return strings.TrimSpace(res.Stdout), nil
}

func (s *Service) nftCheck(ctx context.Context, script string) error {
	return s.nftScript(ctx, script, true)
}

// nftScript runs a script from a temporary file beside the ruleset.
func (s *Service) nftScript(ctx context.Context, script string, checkOnly bool) error {
	dir := filepath.Dir(s.o.RulesetPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := atomicfile.TempBeside(s.o.RulesetPath, []byte(script))
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	args := []string{"-f", tmp}
	prefix := "nft -f failed: "
	if checkOnly {
		args = []string{"-c", "-f", tmp}
		prefix = "nft -c refused the publish table: "
	}
	if res := s.o.Run.Run(ctx, "nft", args...); res.Err != nil {
		return toolError(prefix, res)
	}
	return nil
}

func toolError(prefix string, res cmdrun.Result) error {
	if errors.Is(res.Err, cmdrun.ErrNotInstalled) {
		return &ApplyError{Msg: prefix + "not installed (apt-get install nftables procps)"}
	}
	return &ApplyError{Msg: prefix + res.Words()}
}
