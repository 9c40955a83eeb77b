package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestSlowBodyIsCutOff: a client that sends headers and then trickles its
// body no longer holds a connection and a goroutine for ever; the log
// WebSocket, which lives past the read timeout, keeps working.
func TestSlowBodyIsCutOff(t *testing.T) {
	d := startDaemon(t)
	c := &http.Client{Timeout: 10 * time.Second}
	r := call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	cookie := strings.SplitN(r.header.Get("Set-Cookie"), ";", 2)[0]
	addr := strings.TrimPrefix(d.base, "http://")

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/api/local/logs/ws", http.Header{"Cookie": {cookie}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /api/auth/login HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pass")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(app.ReadTimeout + 10*time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server still waits for the body %s after the headers", app.ReadTimeout+10*time.Second)
	}
	if err == nil && !strings.HasPrefix(line, "HTTP/1.1 4") {
		t.Fatalf("answer to a cut-off body: %q", line)
	}

	// Past the read timeout, the WebSocket still carries an operation's lines.
	if r := call(t, c, "POST", d.base+"/api/local/setup-banner", "", map[string]string{"Cookie": cookie}); r.status != 200 {
		t.Fatalf("setup-banner: %d %v", r.status, r.body)
	}
	ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, msg, err := ws.ReadMessage(); err != nil || !strings.Contains(string(msg), `"op":"setup-banner"`) {
		t.Fatalf("log WebSocket after %s: %q %v", app.ReadTimeout, msg, err)
	}
}

// TestRetentionPrunesAtStart: rows older than --retention-days are gone
// once the daemon has started.
func TestRetentionPrunesAtStart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, e := range []store.AuditEntry{
		{CreatedAt: now.Add(-40 * 24 * time.Hour), Kind: "LOGIN_FAILED", ClientAddr: "192.0.2.40", Detail: "forty days"},
		{CreatedAt: now.Add(-20 * 24 * time.Hour), Kind: "LOGIN_FAILED", ClientAddr: "192.0.2.20", Detail: "twenty days"},
	} {
		if err := st.InsertAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	d := startDaemon(t, "--data-dir", dir, "--retention-days", "30")
	for i := 0; !strings.Contains(d.logText(), "retention: pruned old rows"); i++ {
		if i == 100 {
			t.Fatalf("no pruning logged:\n%s", d.logText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	r := call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	cookie := strings.SplitN(r.header.Get("Set-Cookie"), ";", 2)[0]
	r = call(t, c, "GET", d.base+"/api/security/logs", "", map[string]string{"Cookie": cookie})
	var details []string
	for _, e := range r.body["data"].([]any) {
		details = append(details, e.(map[string]any)["detail"].(string))
	}
	got := strings.Join(details, ",")
	if strings.Contains(got, "forty days") || !strings.Contains(got, "twenty days") {
		t.Fatalf("audit details after start with --retention-days 30: %q", got)
	}
	if r := call(t, c, "GET", d.base+"/healthz", "", nil); r.status != 200 {
		t.Fatal(r.status)
	}
	out, err := exec.Command(binary(t), "serve", "--retention-days", "0", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--retention-days") {
		t.Fatalf("--retention-days 0 accepted: %v %s", err, out)
	}
}
