package localsetup

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
)

// Both values go into the Caddyfile's global options as one token each, so
// they are held to characters that Caddy reads literally: no spaces,
// quotes, braces, '#' or placeholders.
var (
	acmeURLChars  = regexp.MustCompile(`^https://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%\-]*)?$|^https://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?(/[A-Za-z0-9._~/%\-]*)?$`)
	acmeRootChars = regexp.MustCompile(`^/[A-Za-z0-9._/+@\-]+$`)
)

const maxACMELen = 2048

// ValidateACME checks the ACME CA setting and returns it normalized:
// CA empty (DefaultACMECA, Let's Encrypt) or an https URL of an ACME
// directory; CARoot empty or the absolute path of a PEM file holding at
// least one certificate, read as Caddy will read it. A root needs a CA of
// its own.
func ValidateACME(a ACME) (ACME, error) {
	a.CA, a.CARoot = strings.TrimSpace(a.CA), strings.TrimSpace(a.CARoot)
	if a.CA == DefaultACMECA {
		a.CA = ""
	}
	if a.CA == "" && a.CARoot != "" {
		return a, InputError("acme_ca_root is only used with another ACME CA than Let's Encrypt: give its directory URL in acme_ca")
	}
	if a.CA != "" {
		u, err := url.Parse(a.CA)
		if len(a.CA) > maxACMELen || err != nil || !acmeURLChars.MatchString(a.CA) || !validURLHost(u) {
			return a, InputError("acme_ca must be the https URL of an ACME directory, for example https://acme-staging-v02.api.letsencrypt.org/directory (empty: Let's Encrypt)")
		}
	}
	if a.CARoot != "" {
		if len(a.CARoot) > maxACMELen || !acmeRootChars.MatchString(a.CARoot) || filepath.Clean(a.CARoot) != a.CARoot {
			return a, InputError("acme_ca_root must be the absolute path of a PEM file (letters, digits and . _ / + @ - only)")
		}
		b, err := os.ReadFile(a.CARoot)
		if err != nil {
			return a, InputError(fmt.Sprintf("acme_ca_root: cannot read %s: %v", a.CARoot, unwrapPathError(err)))
		}
		if !hasPEMCertificate(b) {
			return a, InputError(fmt.Sprintf("acme_ca_root: %s holds no PEM certificate", a.CARoot))
		}
	}
	return a, nil
}

func validURLHost(u *url.URL) bool {
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	h := u.Hostname()
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return netcheck.ValidHostname(h)
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func hasPEMCertificate(b []byte) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if blk.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(blk.Bytes); err == nil {
				return true
			}
		}
	}
}

// SetACME validates and saves the ACME CA setting, then redeploys the
// Caddyfile when the proxy is installed. When caddy refuses it, the old
// setting is put back and re-applied, and caddy's words are returned.
func (s *Service) SetACME(ctx context.Context, a ACME) (ACME, error) {
	a, err := ValidateACME(a)
	if err != nil {
		return a, err
	}
	old, err := s.Settings.ACME(ctx)
	if err != nil {
		return a, err
	}
	if err := s.Settings.SetACME(ctx, a); err != nil {
		return a, err
	}
	if err := s.DeployProxy(ctx, false); err != nil {
		if rerr := s.Settings.SetACME(ctx, old); rerr == nil {
			s.DeployProxy(ctx, false)
		}
		return a, fmt.Errorf("web proxy: %w", err)
	}
	return s.Settings.ACME(ctx)
}
