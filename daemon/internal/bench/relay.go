package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// The relay pair is the reference the tunnel figures are read against: two
// processes that do what a tunnel of two processes with TLS between them
// cannot do without, accept, dial the next hop and copy both ways, and
// nothing of frp's (no multiplexing, no control connection, no plugin).
// Traffic crosses loopback three times and is encrypted and decrypted once,
// as through frps and frpc. It is not a bound: frps and frpc can do better
// (they cork large writes, the relays do not), but a goal far above what
// the relays reach, and above what they spend per request, is one for the
// machine or the design rather than for the engines.

// relayEnv, set to "LISTEN TO in|out", makes the bench's own binary a
// relay: "in" accepts TLS and dials plain TCP, "out" accepts plain TCP and
// dials TLS.
const relayEnv = "TUNNELSVC_BENCH_RELAY"

func serveRelay(spec string) {
	f := strings.Fields(spec)
	if len(f) != 3 || (f[2] != "in" && f[2] != "out") {
		fmt.Fprintf(os.Stderr, "relay: %s=%q: want \"LISTEN TO in|out\"\n", relayEnv, spec)
		os.Exit(2)
	}
	listen, to, tlsIn := f[0], f[1], f[2] == "in"
	var l net.Listener
	var err error
	if tlsIn {
		var cert tls.Certificate
		if cert, err = selfSigned(); err == nil {
			l, err = tls.Listen("tcp", listen, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
	} else {
		l, err = net.Listen("tcp", listen)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			var o net.Conn
			var err error
			if tlsIn {
				o, err = dialer.Dial("tcp", to)
			} else {
				o, err = tls.DialWithDialer(dialer, "tcp", to, &tls.Config{InsecureSkipVerify: true})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "relay:", err)
				return
			}
			defer o.Close()
			done := make(chan struct{})
			go func() {
				io.Copy(o, c)
				o.Close()
				close(done)
			}()
			io.Copy(c, o)
			c.Close()
			<-done
		}()
	}
}

// selfSigned is the relay's TLS certificate; the other relay does not
// check it (nothing but the cost of TLS is measured).
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"relay"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// RelayPair is two relays in front of a target: Port reaches it through
// both.
type RelayPair struct {
	Port  int
	Procs []*Proc
}

// startRelayPair runs two relays in front of target. The relay that faces
// the target runs in frpc's environment, the other in frps's.
func startRelayPair(bins Bins, name, target string) (RelayPair, error) {
	var r RelayPair
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	fail := func(err error) (RelayPair, error) {
		for _, p := range r.Procs {
			p.Kill(syscall.SIGTERM)
		}
		return RelayPair{}, err
	}
	next := target
	for _, mode := range []string{"in", "out"} {
		env := bins.ClientEnv
		if mode == "out" {
			env = bins.ServerEnv
		}
		port, err := FreePort()
		if err != nil {
			return fail(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		p, err := StartProcEnv(name+" relay "+mode, append([]string{relayEnv + "=" + addr + " " + next + " " + mode}, env...), exe)
		if err != nil {
			return fail(err)
		}
		r.Procs = append(r.Procs, p)
		if err := waitTCP(addr, 10*time.Second, p); err != nil {
			return fail(err)
		}
		next, r.Port = addr, port
	}
	return r, nil
}
