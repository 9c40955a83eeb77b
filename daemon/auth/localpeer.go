package auth

import "context"

// localPeerKey holds the user id of a local-socket connection's peer.
type localPeerKey struct{}

// WithLocalPeer marks ctx as a request on the daemon's local API socket
// from the user uid. The API lets root (0) call the routes an API token of
// scope write may call, with no token, and refuses any other user.
func WithLocalPeer(ctx context.Context, uid int) context.Context {
	return context.WithValue(ctx, localPeerKey{}, uid)
}

// LocalPeer is the user id WithLocalPeer put in ctx; false for a request
// that did not come through the local socket.
func LocalPeer(ctx context.Context) (int, bool) {
	uid, ok := ctx.Value(localPeerKey{}).(int)
	return uid, ok
}
