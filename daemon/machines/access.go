package machines

import (
	"context"
	"fmt"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// MaxAllowIPs bounds a tunnel's allow_ips list.
const MaxAllowIPs = 64

// MaxRememberDays bounds remember_days.
const MaxRememberDays = 90

// accessChange is a validated change of a tunnel's access settings; the
// password is hashed only once every field has been accepted.
type accessChange struct {
	next     store.TunnelAccess
	password string
	changed  bool
}

// planAccess validates in's access fields against the tunnel t (after its
// other fields are merged) and its current access cur.
func planAccess(t store.Tunnel, cur store.TunnelAccess, in TunnelInput) (accessChange, error) {
	ch := accessChange{next: cur}
	ch.next.TunnelID = t.ID
	if ch.next.Access == "" {
		ch.next.Access = gate.Public
	}
	if in.Access == nil && in.Password == nil && in.AllowIPs == nil && in.SSOAllow == nil && in.Rules == nil && in.RememberDays == nil {
		return ch, nil
	}
	if t.Kind != "http" {
		return ch, onlyHTTP(in)
	}
	if in.Access != nil {
		switch a := strings.TrimSpace(*in.Access); a {
		case gate.Public, gate.Operator, gate.Password, gate.SSO:
			ch.next.Access = a
		default:
			return ch, InputError(`access must be "public", "operator", "password" or "sso"`)
		}
	}
	if in.SSOAllow != nil {
		list, err := gate.ParseSSOAllow(*in.SSOAllow)
		if err != nil {
			return ch, InputError("sso_allow: " + err.Error())
		}
		ch.next.SSOAllow = list
	}
	if ch.next.Access == gate.SSO && len(ch.next.SSOAllow) == 0 {
		return ch, InputError(`sso_allow is required for access "sso": the emails, @domains or group:names that may enter`)
	}
	if ch.next.Access != gate.SSO {
		ch.next.SSOAllow = nil
	}
	if in.Password != nil && *in.Password != "" {
		if ch.next.Access != gate.Password {
			return ch, InputError(`password is only for access "password"`)
		}
		if err := auth.CheckPassword(*in.Password); err != nil {
			return ch, InputError(err.Error())
		}
		ch.password = *in.Password
	}
	if ch.next.Access != gate.Password {
		ch.next.PasswordHash = ""
	} else if ch.password == "" && (cur.Access != gate.Password || cur.PasswordHash == "") {
		return ch, InputError(`password is required for access "password"`)
	}
	if err := ch.planLists(in); err != nil {
		return ch, err
	}
	ch.changed = true
	return ch, nil
}

// onlyHTTP refuses the access fields of a tcp or udp tunnel, but for
// their defaults.
func onlyHTTP(in TunnelInput) error {
	switch {
	case in.Access != nil && strings.TrimSpace(*in.Access) != gate.Public:
		return InputError("access is only for http tunnels")
	case in.Password != nil && *in.Password != "":
		return InputError("password is only for http tunnels")
	case in.AllowIPs != nil && len(*in.AllowIPs) > 0:
		return InputError("allow_ips is only for http tunnels")
	case in.SSOAllow != nil && len(*in.SSOAllow) > 0:
		return InputError("sso_allow is only for http tunnels")
	case in.Rules != nil && len(*in.Rules) > 0:
		return InputError("rules are only for http tunnels")
	case in.RememberDays != nil && *in.RememberDays != 0:
		return InputError("remember_days is only for http tunnels")
	}
	return nil
}

// planLists checks the allow list, the path rules and remember_days of
// ch's next access.
func (ch *accessChange) planLists(in TunnelInput) error {
	if in.Rules != nil {
		rules, err := gate.ParseRules(*in.Rules)
		if err != nil {
			return InputError(err.Error())
		}
		ch.next.Rules = rules
	}
	if in.RememberDays != nil {
		if d := *in.RememberDays; d < 0 || d > MaxRememberDays {
			return InputError(fmt.Sprintf("remember_days must be between 0 (a day) and %d", MaxRememberDays))
		}
		ch.next.RememberDays = *in.RememberDays
	}
	if ch.next.RememberDays != 0 && ch.next.Access != gate.Password && ch.next.Access != gate.SSO {
		if in.RememberDays != nil {
			return InputError(`remember_days is only for access "password" and "sso"`)
		}
		ch.next.RememberDays = 0 // the gate it was for is gone
	}
	if in.AllowIPs != nil {
		if len(*in.AllowIPs) > MaxAllowIPs {
			return InputError(fmt.Sprintf("allow_ips may hold at most %d entries", MaxAllowIPs))
		}
		var bad []string
		ch.next.AllowIPs, bad = gate.ParseAllowList(*in.AllowIPs)
		// Every bad entry is named, so one correction fixes them all.
		switch len(bad) {
		case 0:
		case 1:
			return InputError("allow_ips: " + bad[0] + " is not an address or CIDR")
		default:
			return InputError("allow_ips: " + strings.Join(bad[:len(bad)-1], ", ") + " and " + bad[len(bad)-1] + " are not addresses or CIDRs")
		}
	}
	return nil
}

// hash turns the accepted password into its argon2id hash.
func (ch *accessChange) hash(ctx context.Context) error {
	if ch.password == "" {
		return nil
	}
	h, err := auth.HashPassword(ctx, ch.password)
	if err != nil {
		return err
	}
	ch.next.PasswordHash = h
	return nil
}

// currentAccess is t's stored access, or the default for a new tunnel.
func (s *Service) currentAccess(ctx context.Context, id int64) (store.TunnelAccess, error) {
	if id == 0 {
		return store.TunnelAccess{Access: gate.Public}, nil
	}
	return s.Store.TunnelAccessOf(ctx, id)
}

// showAccess fills the access fields of http tunnels in ts.
func (s *Service) showAccess(ctx context.Context, ts []Tunnel) error {
	list, err := s.Store.HTTPTunnelAccess(ctx)
	if err != nil {
		return err
	}
	byID := make(map[int64]store.TunnelAccess, len(list))
	for _, a := range list {
		byID[a.TunnelID] = a
	}
	for i := range ts {
		if a, ok := byID[ts[i].ID]; ok {
			ts[i].setAccess(a)
		}
	}
	return nil
}

func (t *Tunnel) setAccess(a store.TunnelAccess) {
	t.Access = a.Access
	t.AllowIPs = append([]string{}, a.AllowIPs...)
	t.HasPassword = a.PasswordHash != ""
	t.SSOAllow = append([]string{}, a.SSOAllow...)
	t.Rules = append([]store.AccessRule{}, a.Rules...)
	t.RememberDays = a.RememberDays
}
