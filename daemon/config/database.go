package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DatabaseEnv is the variable that names the PostgreSQL database.
const DatabaseEnv = "TUNNELSVC_DATABASE"

// DatabaseCredential is the systemd credential (LoadCredential=) that, when
// given, takes the place of DatabaseEnv: the URL may hold a password, and a
// credential is readable by the daemon alone, not by every process that can
// read the environment file or the unit's environment.
const DatabaseCredential = "database-url"

// maxCredentialBytes bounds what is read from the credential file; a URL is
// far smaller, and a wrong path (a log file, a device) must not be slurped.
const maxCredentialBytes = 64 << 10

// lookupEnv is the environment as the daemon sees it: the database
// credential, when systemd passed a non-empty one, stands in for
// TUNNELSVC_DATABASE. The packaged unit passes a blank default when
// /etc/tunnelsvc/database-url is missing (so the unit still starts); a blank
// credential leaves the variable in charge. A credential that exists but
// cannot be read is kept for Finish to report: Register cannot fail, and
// the daemon must not quietly fall back to another database.
func (c *Config) lookupEnv(name string) (string, bool) {
	if name == DatabaseEnv {
		dir, id := os.Getenv("CREDENTIALS_DIRECTORY"), DatabaseCredential
		if dir == "" {
			// Outside the unit (the admin commands, run from a root
			// shell): the file the unit loads the credential from, so
			// they open the daemon's database and not a stale SQLite file.
			dir, id = filepath.Split(credentialFile)
		}
		v, err := readCredential(dir, id)
		if err != nil {
			c.credentialErr = err
			return "", true
		}
		if v != "" {
			return v, true
		}
	}
	return os.LookupEnv(name)
}

// DatabaseCredentialFile is where the packaged unit loads the database
// credential from (LoadCredential=database-url:<this>).
const DatabaseCredentialFile = "/etc/tunnelsvc/database-url"

// credentialFile is read outside the unit; tests point it elsewhere.
var credentialFile = DatabaseCredentialFile

// readCredential returns the trimmed content of credential id in dir, ""
// when dir is empty or the credential is absent.
func readCredential(dir, id string) (string, error) {
	if dir == "" {
		return "", nil
	}
	f, err := os.Open(filepath.Join(dir, id))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("credential %s: %w", id, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCredentialBytes+1))
	if err != nil {
		return "", fmt.Errorf("credential %s: %w", id, err)
	}
	if len(b) > maxCredentialBytes {
		return "", fmt.Errorf("credential %s is larger than %d bytes; it should hold one URL", id, maxCredentialBytes)
	}
	return strings.TrimSpace(string(b)), nil
}

// sslModes are the values libpq and pgx accept for sslmode.
var sslModes = map[string]bool{
	"disable": true, "allow": true, "prefer": true, "require": true, "verify-ca": true, "verify-full": true,
}

// CheckDatabaseURL refuses a URL that is neither empty (SQLite) nor a
// postgres:// or postgresql:// URL naming a database. Its messages never
// quote the URL: it may hold a password.
func CheckDatabaseURL(raw string) error {
	if raw == "" {
		return nil
	}
	const want = "want a postgres:// or postgresql:// URL such as postgres://tunnelsvc@db.example.com/tunnelsvc?sslmode=verify-full (see docs/database.md)"
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL (a password with characters such as @ / : # ? must be percent-encoded); %s", want)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Errorf("scheme %q is not supported; %s", u.Scheme, want)
	}
	if u.Opaque != "" {
		return fmt.Errorf("not a URL with a host (postgres://HOST/DB); %s", want)
	}
	if m := u.Query().Get("sslmode"); m != "" && !sslModes[m] {
		return fmt.Errorf("sslmode=%q is not one of disable, allow, prefer, require, verify-ca, verify-full", m)
	}
	if strings.Trim(u.Path, "/") == "" && u.Query().Get("dbname") == "" {
		return fmt.Errorf("%s names no database (add /DBNAME after the host)", RedactDatabaseURL(raw))
	}
	return nil
}

func checkDatabase(raw string) error {
	if err := CheckDatabaseURL(raw); err != nil {
		return fmt.Errorf("--database / $%s: %w; empty means SQLite in --data-dir", DatabaseEnv, err)
	}
	return nil
}

// RedactDatabaseURL is how a database URL is shown anywhere (status API,
// dashboard, CLI output, errors): the password becomes ***, and every query
// parameter but sslmode is dropped, since others (password=, sslkey=,
// sslpassword=) may hold or point at secrets. An empty URL (SQLite) stays
// empty; one that does not parse is not shown at all.
func RedactDatabaseURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return "(unparsable URL, not shown)"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "***")
		}
	}
	q := url.Values{}
	if m := u.Query().Get("sslmode"); m != "" {
		q.Set("sslmode", m)
	}
	u.RawQuery = q.Encode()
	u.Fragment, u.RawFragment = "", ""
	u.ForceQuery = false
	// url.URL escapes the * of the placeholder; show it as written.
	return strings.Replace(u.String(), ":%2A%2A%2A@", ":***@", 1)
}
