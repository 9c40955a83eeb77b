package machines

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// MaxAllowIPs bounds a tunnel's allow_ips list.
const MaxAllowIPs = 64

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
	if in.Access == nil && in.Password == nil && in.AllowIPs == nil && in.SSOAllow == nil {
		return ch, nil
	}
	if t.Kind != "http" {
		switch {
		case in.Access != nil && strings.TrimSpace(*in.Access) != gate.Public:
			return ch, InputError("access is only for http tunnels")
		case in.Password != nil && *in.Password != "":
			return ch, InputError("password is only for http tunnels")
		case in.AllowIPs != nil && len(*in.AllowIPs) > 0:
			return ch, InputError("allow_ips is only for http tunnels")
		case in.SSOAllow != nil && len(*in.SSOAllow) > 0:
			return ch, InputError("sso_allow is only for http tunnels")
		}
		return ch, nil
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
	if in.AllowIPs != nil {
		if len(*in.AllowIPs) > MaxAllowIPs {
			return ch, InputError(fmt.Sprintf("allow_ips may hold at most %d entries", MaxAllowIPs))
		}
		seen := map[string]bool{}
		var bad []string
		ch.next.AllowIPs = nil
		for _, v := range *in.AllowIPs {
			p, err := gate.ParseAllow(v)
			if err != nil {
				bad = append(bad, strconv.Quote(strings.TrimSpace(v)))
				continue
			}
			if s := p.String(); !seen[s] {
				seen[s] = true
				ch.next.AllowIPs = append(ch.next.AllowIPs, s)
			}
		}
		// Every bad entry is named, so one correction fixes them all.
		switch len(bad) {
		case 0:
		case 1:
			return ch, InputError("allow_ips: " + bad[0] + " is not an address or CIDR")
		default:
			return ch, InputError("allow_ips: " + strings.Join(bad[:len(bad)-1], ", ") + " and " + bad[len(bad)-1] + " are not addresses or CIDRs")
		}
	}
	ch.changed = true
	return ch, nil
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
}
