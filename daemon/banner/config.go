package banner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// Config is the ban-tool config of spec §2 ("Ban-tool config"), applied to
// both managed jails.
type Config struct {
	MaxRetry int `json:"max_retry"`
	FindTime int `json:"find_time"`
	BanTime  int `json:"ban_time"`
}

// DefaultConfig is used until the operator saves one.
var DefaultConfig = Config{MaxRetry: 5, FindTime: 600, BanTime: 3600}

// Limits from spec §8 ("Ban config minimums").
const (
	MinMaxRetry = 1
	MinFindTime = 10
	MinBanTime  = 10
	// maxSeconds keeps values far from fail2ban's and SQLite's integer edges
	// (ten years).
	maxSeconds = 10 * 365 * 24 * 3600
	// maxRetryCap: a bigger number is a typo, not a policy.
	maxRetryCap = 1000
)

// ValidationError is bad input: the API answers 400 with its text.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// Validate checks c against the spec's minimums and our sanity caps.
func (c Config) Validate() error {
	switch {
	case c.MaxRetry < MinMaxRetry || c.MaxRetry > maxRetryCap:
		return invalid("max_retry must be between %d and %d", MinMaxRetry, maxRetryCap)
	case c.FindTime < MinFindTime || c.FindTime > maxSeconds:
		return invalid("find_time must be between %d and %d seconds", MinFindTime, maxSeconds)
	case c.BanTime < MinBanTime || c.BanTime > maxSeconds:
		return invalid("ban_time must be between %d and %d seconds", MinBanTime, maxSeconds)
	}
	return nil
}

// Settings keys.
const (
	keyConfig    = "banner.config"
	keyWhitelist = "banner.whitelist"
)

func loadJSON(ctx context.Context, st *store.Store, key string, v any) (bool, error) {
	raw, err := st.GetSetting(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return false, fmt.Errorf("setting %s: %w", key, err)
	}
	return true, nil
}

func saveJSON(ctx context.Context, st *store.Store, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return st.SetSetting(ctx, key, string(raw))
}

// Config returns the saved config, or DefaultConfig.
func (s *Service) Config(ctx context.Context) (Config, error) {
	c := DefaultConfig
	if _, err := loadJSON(ctx, s.store, keyConfig, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Whitelist returns the saved whitelist entries (addresses and CIDRs).
func (s *Service) Whitelist(ctx context.Context) ([]string, error) {
	list := []string{}
	if _, err := loadJSON(ctx, s.store, keyWhitelist, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// NormalizeEntry validates a whitelist entry (an IP address or a CIDR) and
// returns its canonical text: 10.1.2.3/24 becomes 10.1.2.0/24 and a
// full-length prefix becomes a plain address, so duplicates compare equal.
func NormalizeEntry(s string) (string, error) {
	if s == "" {
		return "", invalid("ip is required")
	}
	e, err := validate.IPOrPrefix(s)
	if validate.IsZone(err) {
		return "", invalid("invalid ip %q: zones are not allowed", s)
	}
	if err != nil {
		return "", invalid("invalid ip %q: expected an address such as 203.0.113.7 or a CIDR such as 203.0.113.0/24", s)
	}
	if strings.HasSuffix(e, "/0") {
		return "", invalid("%s would whitelist every address", s)
	}
	return e, nil
}

func addEntry(list []string, e string) ([]string, bool) {
	if slices.Contains(list, e) {
		return list, false
	}
	return append(slices.Clone(list), e), true
}
