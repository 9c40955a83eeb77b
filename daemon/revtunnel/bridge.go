package revtunnel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

// Bridge carries frp's wss transport, for machines that can only get out
// on port 443, from the web proxy to frps.
//
// frpc's wss transport is a WebSocket inside one TLS connection: the web
// proxy terminates that TLS with a certificate from the tunnel CA for
// tunnelca.ServerName (what frpc pins, as on the direct transport) and
// hands the WebSocket to the bridge. Inside it is frp's protocol in the
// clear, and frps, which requires TLS from every client
// (transport.tls.force), would refuse it on its own WebSocket listener. So
// the bridge opens a TLS connection of its own to frps on loopback, as a
// direct client would, and copies between the two. frps then sees every
// machine as either TLS from the Internet or TLS from the bridge, and
// nothing else is accepted anywhere.
//
// frps tells the plugin where a Login came from by its TCP peer, which for
// a bridged machine is the bridge's own loopback address; Via maps that
// address back to the machine's, as the web proxy reported it.
type Bridge struct {
	// Dial opens a TLS connection to frps, checked against the tunnel CA.
	// It is asked at every connection (frps's port is a setting).
	Dial func(ctx context.Context) (net.Conn, error)
	Log  *slog.Logger

	mu    sync.Mutex
	conns map[string]string // the bridge's address as frps sees it -> the machine's
}

// BridgeDialTimeout bounds the bridge's connection to frps.
const BridgeDialTimeout = 5 * time.Second

// bridgeBuffer is the size of one WebSocket message the bridge sends: one
// TLS record from frps (at most 16 KiB) fits.
const bridgeBuffer = 32 << 10

var upgrader = websocket.Upgrader{
	ReadBufferSize:  bridgeBuffer,
	WriteBufferSize: bridgeBuffer,
	// frpc's Origin is http://<server name>; the WebSocket carries only
	// frp's protocol, which authenticates the machine itself, so a page in
	// a browser that opened one would get nothing from it.
	CheckOrigin: func(*http.Request) bool { return true },
}

// TLSDialer is Bridge.Dial for frps at addr (host:port), with its
// certificate checked against ca (the tunnel CA's PEM) for
// tunnelca.ServerName, as frpc checks it.
func TLSDialer(addr func(ctx context.Context) (string, error), ca func(ctx context.Context) ([]byte, error)) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		a, err := addr(ctx)
		if err != nil {
			return nil, err
		}
		pem, err := ca(ctx)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("the tunnel CA certificate is not PEM")
		}
		ctx, cancel := context.WithTimeout(ctx, BridgeDialTimeout)
		defer cancel()
		d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: tunnelca.ServerName, MinVersion: tls.VersionTLS12}}
		return d.DialContext(ctx, "tcp", a)
	}
}

func (b *Bridge) log() *slog.Logger {
	if b.Log == nil {
		return slog.Default()
	}
	return b.Log
}

// Via returns the address of the machine behind a connection frps reports
// from clientAddress (host:port), and whether that connection is the
// bridge's.
func (b *Bridge) Via(clientAddress string) (string, bool) {
	if b == nil {
		return "", false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.conns[clientAddress]
	return a, ok
}

func (b *Bridge) remember(local, machine string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		b.conns = map[string]string{}
	}
	b.conns[local] = machine
}

func (b *Bridge) forget(local string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, local)
}

// ServeHTTP takes GET /~!frp from the web proxy for the tunnel server's
// name, upgrades it and bridges it to frps.
func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if host, _, err := net.SplitHostPort(r.Host); (err == nil && host != tunnelca.ServerName) || (err != nil && r.Host != tunnelca.ServerName) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if r.URL.Path != frpconf.WebsocketPath || !websocket.IsWebSocketUpgrade(r) {
		http.Error(w, "this is the tunnel server's wss transport: only a tunnel client (frpc, transport.protocol = \"wss\") connects here", http.StatusBadRequest)
		return
	}
	// The web proxy on loopback appends the machine's address to
	// X-Forwarded-For, as for the access gate.
	machine := auth.ClientAddr(r, netip.Addr.IsLoopback).String()
	up, err := b.Dial(r.Context())
	if err != nil {
		b.log().Warn("wss bridge: the tunnel server does not answer", "machine", machine, "err", err)
		http.Error(w, "the tunnel server does not answer", http.StatusBadGateway)
		return
	}
	local := up.LocalAddr().String()
	// Before any byte of the machine's Login reaches frps.
	b.remember(local, machine)
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		// Upgrade has answered the client.
		b.forget(local)
		up.Close()
		return
	}
	go b.pipe(ws, up, local)
}

// pipe copies both ways until either side ends, then closes both.
func (b *Bridge) pipe(ws *websocket.Conn, up net.Conn, local string) {
	defer b.forget(local)
	var once sync.Once
	done := func() {
		once.Do(func() {
			ws.Close()
			up.Close()
		})
	}
	go func() {
		defer done()
		buf := make([]byte, bridgeBuffer)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				}
				return
			}
		}
	}()
	defer done()
	for {
		_, rd, err := ws.NextReader()
		if err != nil {
			return
		}
		if _, err := io.Copy(up, rd); err != nil {
			return
		}
	}
}
