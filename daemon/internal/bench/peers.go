package bench

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The peers are what an operator would run instead, measured side by side
// with the tunnel in the same run and on the same pinning:
//   - an OpenSSH reverse tunnel: sshd on the VPS side (its own, on a test
//     port of loopback, never 22), `ssh -R` on the machine's, and Caddy in
//     front of the forwarded port, as many homelabs set it up;
//   - frp's own HTTP vhost: frps's vhostHTTPPort and an frpc `type =
//     "http"` proxy, frp's defaults and no Caddy: the engine without this
//     control plane;
//   - the two bare TLS relays (relay.go), the floor.

const (
	sshHost   = "ssh." + domain
	vhostHost = "vhost." + domain
)

// Peers are the peers' processes and the ports that reach the origin
// through them.
type Peers struct {
	SSHD, SSH            *Proc
	SSHPort              int // the port `ssh -R` forwards on the VPS side (Caddy's upstream)
	VhostFRPS, VhostFRPC *Proc
	VhostPort            int // frps's vhostHTTPPort
}

func (p *Peers) close() {
	if p == nil {
		return
	}
	for _, x := range []*Proc{p.SSH, p.SSHD, p.VhostFRPC, p.VhostFRPS} {
		x.Kill(syscall.SIGTERM)
	}
}

// sshdConfig: only public-key logins for one key, remote forwards only,
// on loopback, nothing written outside dir.
const sshdConfig = `Port %d
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding remote
AllowAgentForwarding no
X11Forwarding no
GatewayPorts no
PrintMotd no
LogLevel ERROR
`

// startSSHPeer runs sshd on a free loopback port and `ssh -R` from the
// machine's side, forwarding remote port to the origin.
func startSSHPeer(p *Peers, dir string, origin int) error {
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/sshd"); serr != nil {
			return fmt.Errorf("sshd (openssh-server; scripts/install-deps.sh installs it) is missing")
		}
		sshd = "/usr/sbin/sshd"
	}
	dir = filepath.Join(dir, "sshd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	hostKey, clientKey := filepath.Join(dir, "host_key"), filepath.Join(dir, "client_key")
	for _, k := range []string{hostKey, clientKey} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			return fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(clientKey + ".pub")
	if err != nil {
		return err
	}
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, pub, 0o600); err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(sshdConfig, port, hostKey, auth)), 0o600); err != nil {
		return err
	}
	// sshd's privilege separation directory, which Debian makes at boot.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return err
	}
	if p.SSHD, err = StartProc("sshd", sshd, "-D", "-e", "-f", cfg); err != nil {
		return err
	}
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second, p.SSHD); err != nil {
		return fmt.Errorf("sshd: %v: %s", err, p.SSHD.Out.String())
	}
	if p.SSHPort, err = FreePort(); err != nil {
		return err
	}
	u, err := user.Current()
	if err != nil {
		return err
	}
	p.SSH, err = StartProc("ssh -R", "ssh", "-N", "-F", "/dev/null", "-i", clientKey, "-p", strconv.Itoa(port),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "ExitOnForwardFailure=yes", "-o", "LogLevel=ERROR",
		"-R", fmt.Sprintf("127.0.0.1:%d:127.0.0.1:%d", p.SSHPort, origin), u.Username+"@127.0.0.1")
	if err != nil {
		return err
	}
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", p.SSHPort), 15*time.Second, p.SSH); err != nil {
		return fmt.Errorf("ssh -R: %v: %s %s", err, p.SSH.Out.String(), p.SSHD.Out.String())
	}
	return nil
}

// frp's HTTP vhost with frp's defaults: a token, TLS between frpc and frps
// (frpc's default), no pool of work connections.
const (
	vhostServerConfig = `bindAddr = "127.0.0.1"
bindPort = %d
vhostHTTPPort = %d
auth.token = "bench-peer"
log.level = "error"
`
	vhostClientConfig = `serverAddr = "127.0.0.1"
serverPort = %d
auth.token = "bench-peer"
log.level = "error"

[[proxies]]
name = "web"
type = "http"
localIP = "127.0.0.1"
localPort = %d
customDomains = ["%s"]
`
)

// startVhostPeer runs frps with an HTTP vhost and an frpc whose http proxy
// serves vhostHost from the origin.
func startVhostPeer(p *Peers, bins Bins, dir string, origin int) error {
	dir = filepath.Join(dir, "frp-vhost")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bind, err := FreePort()
	if err != nil {
		return err
	}
	if p.VhostPort, err = FreePort(); err != nil {
		return err
	}
	sc, cc := filepath.Join(dir, "frps.toml"), filepath.Join(dir, "frpc.toml")
	if err := os.WriteFile(sc, []byte(fmt.Sprintf(vhostServerConfig, bind, p.VhostPort)), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(cc, []byte(fmt.Sprintf(vhostClientConfig, bind, origin, vhostHost)), 0o600); err != nil {
		return err
	}
	if p.VhostFRPS, err = StartProcEnv("frps (vhost)", bins.ServerEnv, bins.FRPS, "-c", sc); err != nil {
		return err
	}
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", bind), 10*time.Second, p.VhostFRPS); err != nil {
		return fmt.Errorf("frps (vhost): %v: %s", err, p.VhostFRPS.Out.String())
	}
	p.VhostFRPC, err = StartProcEnv("frpc (vhost)", bins.ClientEnv, bins.FRPC, "-c", cc)
	return err
}
