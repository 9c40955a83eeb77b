package localsetup_test

import (
	"context"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestRecordOutcomeMinimalService: a set-up built with only its settings
// (no clock, no logger, as several tests and tools build it) still keeps
// outcomes, and ignores operations that have none.
func TestRecordOutcomeMinimalService(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := &localsetup.Service{Settings: localsetup.Settings{Store: st}}
	s.RecordOutcome(ctx, localsetup.OutcomeFirewall, true, "firewall mode set to manual")
	s.RecordOperation("setup-banner", false, "fail2ban is not installed (apt-get install fail2ban)")
	s.RecordOperation("something-else", true, "ignored")
	got, err := s.Settings.Outcomes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got["firewall"].OK || got["firewall"].Message != "firewall mode set to manual" || got["firewall"].At.IsZero() ||
		got["banner"].OK || got["banner"].Message != "fail2ban is not installed (apt-get install fail2ban)" {
		t.Fatalf("outcomes = %+v", got)
	}
}
