package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

func TestMachinesOutdatedCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := openServices(t, dir)
	add := func(name, user string, outdated bool) store.Machine {
		m, err := a.Store.RegisterMachine(ctx, store.NewMachine{Name: name, Username: user, SecretHash: name + "-s", AgentTokenHash: name + "-a",
			Seal: func(int64) (string, error) { return "x", nil }, Now: time.Now(), Ports: store.PortRange{Lo: 20000, Hi: 20100}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Store.SetAgentOutdated(ctx, m.ID, outdated); err != nil {
			t.Fatal(err)
		}
		return m
	}
	var out bytes.Buffer
	flags := []string{"--data-dir", dir, "--server-host", "vps.example.com"}
	// None yet.
	add("web", "pi", false)
	if err := machinesOutdated(flags, &out); err != nil || !strings.Contains(out.String(), "no machine needs a rejoin") {
		t.Fatalf("none outdated: %v %q", err, out.String())
	}
	nas := add("nas", "alice", true)
	a.Store.Close()

	out.Reset()
	if err := machinesCmd(append([]string{"outdated"}, flags...), &out); err != nil {
		t.Fatal(err)
	}
	line := "curl -fsSL http://vps.example.com:7380/static/bootstrap.sh | sudo bash -s -- --rejoin"
	ssh := "ssh -t -J root@vps.example.com -p " + strconv.Itoa(nas.TunnelPort) + " alice@127.0.0.1 '" + line + "'"
	got := out.String()
	for _, want := range []string{"1 machine(s) run an agent from before fleet updates", "\nnas (id " + strconv.FormatInt(nas.ID, 10) + ", pending)\n  " + ssh + "\n", "On a machine itself, the line is:\n  " + line + "\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "web") {
		t.Errorf("an up-to-date machine is listed:\n%s", got)
	}

	out.Reset()
	if err := machinesOutdated(append(flags, "--json"), &out); err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(list) != 1 || list[0]["name"] != "nas" || list[0]["command"] != ssh || list[0]["rejoin_command"] != line || list[0]["id"] != float64(nas.ID) {
		t.Fatalf("JSON = %v", list)
	}

	// --base-url names the join address.
	out.Reset()
	if err := machinesOutdated([]string{"--data-dir", dir, "--base-url", "https://tunnels.example.org", "--json"}, &out); err != nil || !strings.Contains(out.String(), "curl -fsSL https://tunnels.example.org/static/bootstrap.sh | sudo bash -s -- --rejoin") {
		t.Fatalf("--base-url: %v %s", err, out.String())
	}
	// Nothing names an address: no line to give, said in words.
	if err := machinesOutdated([]string{"--data-dir", dir}, &out); err == nil || !strings.Contains(err.Error(), "pass --base-url") {
		t.Fatalf("no address: %v", err)
	}
	if err := machinesOutdated([]string{"--data-dir", dir + "/missing"}, &out); err == nil || !strings.Contains(err.Error(), "no data directory") {
		t.Fatalf("missing data dir: %v", err)
	}
	if err := machinesCmd(nil, &out); err == nil || !strings.Contains(err.Error(), "usage: tunnelsvc machines outdated") {
		t.Fatalf("no subcommand: %v", err)
	}
}
