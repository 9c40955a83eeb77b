package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NginxPort is one listener of StartNginx's: on 127.0.0.1:Port, reading a
// PROXY protocol header first when ProxyProtocol is set.
type NginxPort struct {
	Port          int
	ProxyProtocol bool
}

// Nginx is a running Debian nginx whose every listener answers any request
// with what nginx knows of its client, one line:
//
//	pp=<PROXY header's source> remote=<peer> xff=<X-Forwarded-For> real=<X-Real-IP>
//
// and writes the same line to its access log (Log), as a service's own
// log would name its visitors.
type Nginx struct{ Log string }

// NginxLine is the answer and log line format.
const nginxLine = `pp=$proxy_protocol_addr remote=$remote_addr xff=$http_x_forwarded_for real=$http_x_real_ip`

// StartNginx runs nginx (one process, in the foreground) in network
// namespace netns ("" for this one) until the test ends. It skips, naming
// the package, when nginx is not installed.
func StartNginx(t testing.TB, netns string, ports ...NginxPort) *Nginx {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx not installed (scripts/install-deps.sh installs nginx)")
	}
	dir := t.TempDir()
	var servers strings.Builder
	for _, p := range ports {
		// With the header, as docs/tunnels.md sets nginx up: the header's
		// source becomes the client's address ($remote_addr, the logs).
		pp, real := "", ""
		if p.ProxyProtocol {
			pp, real = " proxy_protocol", "        set_real_ip_from 127.0.0.1;\n        real_ip_header proxy_protocol;\n"
		}
		fmt.Fprintf(&servers, "    server {\n        listen 127.0.0.1:%d%s;\n%s        location / { return 200 \"%s\\n\"; }\n    }\n", p.Port, pp, real, nginxLine)
	}
	n := &Nginx{Log: filepath.Join(dir, "access.log")}
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
    default_type text/plain;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    log_format line '%[2]s';
    access_log %[3]s line;
%[4]s}
`, dir, nginxLine, n.Log, servers.String())
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", path}
	if netns != "" {
		Start(t, "nginx", "ip", append([]string{"netns", "exec", netns, bin}, args...)...)
	} else {
		Start(t, "nginx", bin, args...)
	}
	for _, p := range ports {
		Eventually(t, 10*time.Second, fmt.Sprintf("nginx listening on 127.0.0.1:%d", p.Port), func() error {
			cmd := []string{"ss", "-Hltn", fmt.Sprintf("sport = :%d", p.Port)}
			if netns != "" {
				cmd = append([]string{"ip", "netns", "exec", netns}, cmd...)
			}
			out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), fmt.Sprintf("127.0.0.1:%d", p.Port)) {
				b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
				return fmt.Errorf("not yet (%s)", strings.TrimSpace(string(b)))
			}
			return nil
		})
	}
	return n
}

// Logged is nginx's access log.
func (n *Nginx) Logged(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(n.Log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
