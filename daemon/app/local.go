package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
)

// listenLocal listens on the Unix socket path, which only its owner may
// open (mode 0600): root, for the daemon runs as root. A socket file left
// by an earlier run is replaced; any other file there is an error.
func listenLocal(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// serveLocal serves the API on the local socket, or says why there is
// none: without it the daemon still serves everything else.
func (a *App) serveLocal(cfg *config.Config, lis *Listeners) *served {
	if lis.Local == nil {
		a.Log.Warn("the local API socket could not be opened: tunnelsvc export and apply need TUNNELSVC_URL and TUNNELSVC_TOKEN",
			"socket", cfg.LocalSocket, "err", lis.LocalErr)
		return serveOn("local API", a.localServer(), nil)
	}
	a.Log.Info("serving the API to root on this edge", "socket", lis.Local.Addr().String())
	return serveOn("local API", a.localServer(), nil, lis.Local)
}

// localServer serves the API on the local socket: each connection carries
// its peer's user id, which the API's guard reads (auth.LocalPeer).
func (a *App) localServer() *http.Server {
	return &http.Server{Handler: a.Handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: ReadTimeout, IdleTimeout: 120 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			uid, err := peerUID(c)
			if err != nil {
				a.Log.Warn("local API socket: could not tell who connected", "err", err)
				return ctx
			}
			return auth.WithLocalPeer(ctx, uid)
		}}
}

// peerUID is the user id of the process at the other end of a Unix
// connection (SO_PEERCRED).
func peerUID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a Unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return int(cred.Uid), nil
}
