package api

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// Log WebSocket timing: a ping keeps proxies from closing an idle stream;
// a watcher that does not take a message within writeWait is dropped.
const (
	wsPingEvery = 30 * time.Second
	wsWriteWait = 10 * time.Second
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 4096,
	CheckOrigin:     sameOrigin,
}

// sameOrigin accepts a handshake without Origin (not a browser) or whose
// Origin names the host the request was sent to.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// logsWS streams background operations' log lines: {time, level, line}, and
// {done, ok} at the end of each operation. A late watcher first gets what
// the latest operation has said so far.
func (s *Server) logsWS(w http.ResponseWriter, r *http.Request) error {
	// Subscribed before the handshake answers, so that a change made right
	// after the client sees the socket open is not missed.
	backlog, ch, cancel := s.hub.Subscribe()
	defer cancel()
	// State-change events go only to clients that ask for them
	// (?events=1), so an older dashboard never sees a message it cannot show.
	events := r.URL.Query().Get("events") == "1"
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // the upgrader has answered
	}
	defer conn.Close()

	// Reading notices the client leaving (and answers its pings).
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		conn.SetReadLimit(1024)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()

	send := func(v any) bool {
		conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
		return conn.WriteJSON(v) == nil
	}
	for _, m := range backlog {
		if !send(m) {
			return nil
		}
	}
	ping := time.NewTicker(wsPingEvery)
	defer ping.Stop()
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "too slow"), time.Now().Add(time.Second))
				return nil
			}
			if m.Event != "" && !events {
				continue
			}
			if !send(m) {
				return nil
			}
		case <-ping.C:
			if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait)) != nil {
				return nil
			}
		case <-closed:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}
