package monitor_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner/bannertest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// A real, private fail2ban bans an address: /metrics counts it in its
// jail and the webhook hears of it.
func TestBanReachesMetricsAndWebhook(t *testing.T) {
	in := bannertest.New(t)
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o := in.Options()
	o.Store = st
	svc := banner.New(o)
	if err := svc.SetConfig(ctx, banner.Config{MaxRetry: 2, FindTime: 600, BanTime: 600}); err != nil {
		t.Fatal(err)
	}
	rec := testutil.NewProgress()
	go svc.Setup(ctx, rec)
	if !rec.Wait(t) {
		t.Fatalf("ban tool setup failed:\n%s", rec.Text())
	}

	var mu sync.Mutex
	var got []notify.Payload
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p notify.Payload
		json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}))
	defer hook.Close()
	if _, err := notify.Save(ctx, st, notify.Settings{URL: hook.URL, Preset: notify.PresetJSON}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sender := &notify.Sender{Store: st, Log: log}
	w := &notify.Watcher{Store: st, Sender: sender, Log: log, Jails: notify.BannerJails(svc)}
	w.Check(ctx) // nothing banned yet

	in.AuthFailures("203.0.113.44", 2)
	if !bannertest.WaitFor(15*time.Second, func() bool { return slices.Contains(in.Banned(banner.AuthJail), "203.0.113.44") }) {
		t.Fatalf("fail2ban did not ban; banned = %v", in.Banned(banner.AuthJail))
	}
	w.Check(ctx)
	sender.Wait()
	mu.Lock()
	if len(got) != 1 || got[0].Kind != notify.KindBanned || got[0].Title != "address banned: 203.0.113.44" {
		t.Errorf("webhook got %+v, want one address_banned for 203.0.113.44", got)
	}
	mu.Unlock()

	tokens := &monitor.Tokens{Store: st}
	tok, _, _ := tokens.Create(ctx)
	srv := httptest.NewServer(monitor.New(monitor.Options{Store: st, Tokens: tokens, Log: log, Jails: monitor.BannerJails(svc)}))
	defer srv.Close()
	_, fams := scrape(t, srv.URL, "Bearer "+tok)
	if v, ok := value(fams, "tunnelsvc_banned_addresses", map[string]string{"jail": banner.AuthJail}); !ok || v != 1 {
		t.Errorf("tunnelsvc_banned_addresses{jail=%q} = %v (present %v), want 1", banner.AuthJail, v, ok)
	}
	if v, ok := value(fams, "tunnelsvc_bans_total", map[string]string{"jail": banner.AuthJail}); !ok || v != 1 {
		t.Errorf("tunnelsvc_bans_total{jail=%q} = %v (present %v), want 1", banner.AuthJail, v, ok)
	}
}
