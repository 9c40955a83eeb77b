package revtunnel_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// tomlKeys lists every key path of a TOML document ("proxies.name", ...).
func tomlKeys(t *testing.T, doc string) []string {
	t.Helper()
	var m map[string]any
	if err := toml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("the rendered TOML does not parse: %v\n%s", err, doc)
	}
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(prefix+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(prefix+"[]", x)
			}
		default:
			out = append(out, prefix)
		}
	}
	walk("", m)
	sort.Strings(out)
	return out
}

// hostile are values with TOML, template and shell syntax in them.
var hostile = []string{
	"fe80::1%lo", "fe80::1%lo\"\n[webServer]\nport = 1", "vps.example.com\"\nuser = \"m1",
	"{{ .Envs.HOME }}", "vps.example.com # x", "a'b", "例え.jp", "$(id)", "`id`", "a\\\"b",
}

// FuzzFrpsConfig: for any plugin address and port the validators accept,
// server.toml has exactly the keys and shape of one rendered from plain
// values (serverParams), carries the values as given, and frps verify
// accepts it. Anything else is refused.
func FuzzFrpsConfig(f *testing.F) {
	f.Add("127.0.0.1:7381", 7000)
	f.Add("[::1]:7381", 65535)
	f.Add("localhost:7381", 1)
	f.Add("127.0.0.1:7381", 0)
	for _, h := range hostile {
		f.Add(h+":7381", 7000)
		f.Add("127.0.0.1:"+h, 7000)
	}
	f.Fuzz(func(t *testing.T, plugin string, port int) {
		p := serverParams
		p.PluginAddr, p.BindPort = plugin, port
		accepted := validate.HostPort(plugin) == nil && validate.Port(port) == nil
		got, err := frpconf.ServerConfig(p, "")
		if !accepted {
			if err == nil {
				t.Fatalf("ServerConfig accepted what the validators refuse: %+v\n%s", p, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("ServerConfig refused %+v: %v", p, err)
		}
		want, err := frpconf.ServerConfig(serverParams, "")
		if err != nil {
			t.Fatal(err)
		}
		if testutil.Shape(got) != testutil.Shape(want) || !reflect.DeepEqual(tomlKeys(t, got), tomlKeys(t, want)) {
			t.Fatalf("server.toml for %+v differs in keys or shape from plain values':\n%s\n--- plain\n%s", p, got, want)
		}
		var back struct {
			HTTPPlugins []struct {
				Addr string `toml:"addr"`
			} `toml:"httpPlugins"`
		}
		toml.Unmarshal([]byte(got), &back)
		if len(back.HTTPPlugins) != 1 || back.HTTPPlugins[0].Addr != plugin {
			t.Fatalf("the plugin address reads back as %+v, want %q", back.HTTPPlugins, plugin)
		}
		if testutil.RealToolSample(50) {
			if err := revtunnel.Verify(context.Background(), frps, got); err != nil {
				t.Fatalf("frps verify refused server.toml for %+v: %v\n%s", p, err, got)
			}
		}
	})
}

// clientFuzzBase is a machine's plain client parameters, as in
// TestClientConfigGolden; FuzzFrpcConfig varies them.
func clientFuzzBase() frpconf.ClientParams {
	ca, err := os.ReadFile(filepath.Join("testdata", "ca.pem"))
	if err != nil {
		panic(err)
	}
	return frpconf.ClientParams{
		ServerAddr: "vps.example.com", ServerPort: 7000, MachineID: 7, Secret: "s3cr3t-of-machine-7",
		SSHLocalPort: 22, TunnelPort: 20001, AgentLocalPort: 7390, AgentPort: 20002,
		Tunnels: []store.Tunnel{{ID: 3, LocalPort: 8080, RemotePort: 20003}},
		CA:      string(ca), ServerName: tunnelca.ServerName,
	}
}

// FuzzFrpcConfig: the same for a machine's client.toml, from the server
// address (--server-host or the host the machine reached the dashboard
// by), its secret and its ports.
func FuzzFrpcConfig(f *testing.F) {
	f.Add("vps.example.com", "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde", 22, 8080)
	f.Add("2001:db8::1", "s3cr3t-of-machine-7", 65535, 1)
	for _, h := range hostile {
		f.Add(h, "s3cr3t-of-machine-7", 22, 8080)
		f.Add("vps.example.com", "s3cr3t-of-machine-7"+h, 22, 8080)
	}
	f.Fuzz(func(t *testing.T, server, secret string, sshPort, localPort int) {
		p := clientFuzzBase()
		p.ServerAddr, p.Secret, p.SSHLocalPort = server, secret, sshPort
		p.Tunnels = []store.Tunnel{{ID: 3, LocalPort: localPort, RemotePort: 20003}}
		_, herr := validate.Host(server)
		accepted := server != "" && herr == nil && validate.Token(secret) == nil && validate.Port(sshPort) == nil && validate.Port(localPort) == nil
		got, err := frpconf.ClientConfig(p)
		if !accepted {
			if err == nil {
				t.Fatalf("ClientConfig accepted what the validators refuse: %+v\n%s", p, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("ClientConfig refused %+v: %v", p, err)
		}
		want, err := frpconf.ClientConfig(clientFuzzBase())
		if err != nil {
			t.Fatal(err)
		}
		// The admin password is hex derived from the secret: a word either way.
		if testutil.Shape(got) != testutil.Shape(want) || !reflect.DeepEqual(tomlKeys(t, got), tomlKeys(t, want)) {
			t.Fatalf("client.toml for %+v differs in keys or shape from plain values':\n%s\n--- plain\n%s", p, got, want)
		}
		var back struct {
			ServerAddr string            `toml:"serverAddr"`
			Metadatas  map[string]string `toml:"metadatas"`
		}
		toml.Unmarshal([]byte(got), &back)
		if back.ServerAddr != server || back.Metadatas[frpconf.MetaToken] != secret || strings.Contains(got, "{{") {
			t.Fatalf("client.toml does not carry the values as given: %+v\n%s", back, got)
		}
		if testutil.RealToolSample(50) {
			if err := revtunnel.Verify(context.Background(), frpc, got); err != nil {
				t.Fatalf("frpc verify refused client.toml for %+v: %v\n%s", p, err, got)
			}
		}
	})
}
