// Package notify tells the operator about trouble without the dashboard:
// a webhook (ntfy or plain JSON) for a machine offline too long and back,
// a banned address, a certificate about to expire, a burst of failed
// logins, and the data disk running low and having room again. Deliveries
// are retried with backoff, and every delivery, sent or failed, is written
// to the activity feed.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Presets: how a notification is written to the webhook URL.
const (
	// PresetNtfy posts the message as the body with Title, Tags and
	// Priority headers (https://docs.ntfy.sh/publish/), to a topic URL.
	PresetNtfy = "ntfy"
	// PresetJSON posts a JSON object (see Payload).
	PresetJSON = "json"
)

// Defaults and bounds of the settings.
const (
	DefaultOfflineMinutes = 5
	MaxOfflineMinutes     = 1440
	settingsKey           = "notify_webhook"
)

// Settings are the webhook and when to use it. An empty URL turns
// notifications off.
type Settings struct {
	URL            string `json:"url"`
	Preset         string `json:"preset"`
	OfflineMinutes int    `json:"offline_minutes"`
}

// InputError is a setting the API refuses; its text says why.
type InputError string

func (e InputError) Error() string { return string(e) }

// Validate normalizes s and refuses what cannot work.
func (s *Settings) Validate() error {
	s.URL = strings.TrimSpace(s.URL)
	if s.Preset == "" {
		s.Preset = PresetJSON
	}
	if s.Preset != PresetNtfy && s.Preset != PresetJSON {
		return InputError("preset must be one of: ntfy, json")
	}
	if s.OfflineMinutes == 0 {
		s.OfflineMinutes = DefaultOfflineMinutes
	}
	if s.OfflineMinutes < 1 || s.OfflineMinutes > MaxOfflineMinutes {
		return InputError(fmt.Sprintf("offline_minutes must be between 1 and %d", MaxOfflineMinutes))
	}
	if s.URL == "" {
		return nil
	}
	if len(s.URL) > 2048 {
		return InputError("url must be at most 2048 characters")
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return InputError("url must be an http or https URL with a host")
	}
	if u.User != nil {
		return InputError("url must not carry a user name or password; put a token in the path or query instead")
	}
	return nil
}

// Load returns the saved settings (defaults when none are saved).
func Load(ctx context.Context, st *store.Store) (Settings, error) {
	s := Settings{Preset: PresetJSON, OfflineMinutes: DefaultOfflineMinutes}
	v, err := st.GetSetting(ctx, settingsKey)
	if errors.Is(err, store.ErrNotFound) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("stored notification settings are unreadable: %w", err)
	}
	return s, nil
}

// Setting validates (and normalizes) s and returns the setting Save
// writes, for a batch that writes it with other changes (a site file's
// apply).
func Setting(s *Settings) (store.SettingWrite, error) {
	if err := s.Validate(); err != nil {
		return store.SettingWrite{}, err
	}
	b, _ := json.Marshal(s)
	return store.SettingWrite{Key: settingsKey, Value: string(b)}, nil
}

// Save validates and stores s.
func Save(ctx context.Context, st *store.Store, s Settings) (Settings, error) {
	kv, err := Setting(&s)
	if err != nil {
		return s, err
	}
	return s, st.SetSetting(ctx, kv.Key, kv.Value)
}
