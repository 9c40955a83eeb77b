package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestFullDataDisk runs the real daemon with its data directory on an
// 8 MiB tmpfs and fills it: /healthz, login, token creation and /metrics
// say the disk is full, in words; with the filler removed everything works
// again in the same process.
func TestFullDataDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, "8m")
	d := startDaemonIn(t, dir)
	c := &http.Client{Timeout: 10 * time.Second}
	r := call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	if r.status != 200 {
		t.Fatalf("setup: %d %v", r.status, r.body)
	}
	session := map[string]string{"Cookie": strings.Split(r.header.Get("Set-Cookie"), ";")[0]}
	r = call(t, c, "POST", d.base+"/api/monitoring/metrics-token", "", session)
	bearer, _ := data(r)["token"].(string)
	if r.status != 200 || bearer == "" {
		t.Fatalf("metrics token: %d %v", r.status, r.body)
	}
	metric := func(name string) float64 {
		t.Helper()
		req, _ := http.NewRequest("GET", d.base+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
		if resp.StatusCode != 200 || m == nil {
			t.Fatalf("/metrics: %d, no %s in\n%s", resp.StatusCode, name, body)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	login := func() result {
		return call(t, c, "POST", d.base+"/api/auth/login", `{"password":"`+password+`"}`, nil)
	}
	token := func() result {
		return call(t, c, "POST", d.base+"/api/bootstrap/tokens", `{"label":"disk"}`, session)
	}
	full := "the data disk is full (" + dir + "): free space on it, then try again"

	filler := testutil.FillDisk(t, dir)
	r = call(t, c, "GET", d.base+"/healthz", "", nil)
	t.Logf("healthz, disk full: %d %v", r.status, r.body)
	if r.status != http.StatusServiceUnavailable || r.body["error"] != "data disk full: "+dir {
		t.Fatalf("healthz on a full disk: %d %v", r.status, r.body)
	}
	r = login()
	t.Logf("login, disk full: %d %v", r.status, r.body)
	if r.status != http.StatusInsufficientStorage || r.body["error"] != full {
		t.Fatalf("login on a full disk: %d %v", r.status, r.body)
	}
	r = token()
	t.Logf("bootstrap token, disk full: %d %v", r.status, r.body)
	if r.status != http.StatusInsufficientStorage || r.body["error"] != full {
		t.Fatalf("token creation on a full disk: %d %v", r.status, r.body)
	}
	r = call(t, c, "POST", d.base+"/api/monitoring/metrics-token", "", session)
	t.Logf("metrics token, disk full: %d %v", r.status, r.body)
	if r.status != http.StatusInsufficientStorage || r.body["error"] != full {
		t.Fatalf("metrics token creation on a full disk: %d %v", r.status, r.body)
	}
	free, isFull := metric("tunnelsvc_data_free_bytes"), metric("tunnelsvc_data_disk_full")
	t.Logf("metrics, disk full: tunnelsvc_data_free_bytes %v, tunnelsvc_data_disk_full %v", free, isFull)
	if free != 0 || isFull != 1 {
		t.Fatalf("metrics on a full disk: free %v, full %v", free, isFull)
	}
	// The log keeps SQLite's own words beside the answer.
	if !regexp.MustCompile(`msg="request failed" method=POST path=/api/auth/login status=507 .*err="database or disk is full"`).MatchString(d.logText()) {
		t.Fatalf("the log does not name the cause:\n%s", d.logText())
	}

	// Space again: no restart, no write needed first.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "healthz after freeing", func() error {
		if r := call(t, c, "GET", d.base+"/healthz", "", nil); r.status != 200 {
			return fmt.Errorf("%d %v", r.status, r.body)
		}
		return nil
	})
	r = login()
	t.Logf("login, space freed: %d %v", r.status, r.body)
	if r.status != 200 || data(r)["message"] != "logged in" {
		t.Fatalf("login after freeing: %d %v", r.status, r.body)
	}
	if r = token(); r.status != 201 && r.status != 200 {
		t.Fatalf("token creation after freeing: %d %v", r.status, r.body)
	}
	free, isFull = metric("tunnelsvc_data_free_bytes"), metric("tunnelsvc_data_disk_full")
	t.Logf("metrics, space freed: tunnelsvc_data_free_bytes %v, tunnelsvc_data_disk_full %v", free, isFull)
	if free < 1<<20 || isFull != 0 {
		t.Fatalf("metrics after freeing: free %v, full %v", free, isFull)
	}
	if d.cmd.ProcessState != nil {
		t.Fatalf("the daemon exited:\n%s", d.logText())
	}
}
