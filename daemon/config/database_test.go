package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRedactDatabaseURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"postgres://db.example.com/tunnelsvc", "postgres://db.example.com/tunnelsvc"},
		{"postgres://tunnelsvc@db.example.com/tunnelsvc?sslmode=verify-full", "postgres://tunnelsvc@db.example.com/tunnelsvc?sslmode=verify-full"},
		{"postgres://tunnelsvc:s3cr%40t@db.example.com:5433/tunnelsvc?sslmode=require", "postgres://tunnelsvc:***@db.example.com:5433/tunnelsvc?sslmode=require"},
		{"postgresql://u:@db/x", "postgresql://u:***@db/x"},
		// Parameters that hold or point at secrets go, sslmode stays.
		{"postgres://u@db/x?password=hunter2&sslmode=verify-ca&sslkey=/k&sslpassword=p&application_name=a", "postgres://u@db/x?sslmode=verify-ca"},
		{"postgres://u:pw@db/x?password=hunter2#frag", "postgres://u:***@db/x"},
		{"postgres:///tunnelsvc?host=/run/postgresql", "postgres:///tunnelsvc"},
		{"postgres://u:pw@[2001:db8::1]:5432/x", "postgres://u:***@[2001:db8::1]:5432/x"},
		// A URL that does not parse is not echoed at all.
		{"postgres://u:p%zz@db/x", "(unparsable URL, not shown)"},
		{"host=db password=hunter2", "(unparsable URL, not shown)"},
		{"postgres:u:hunter2@db/x", "(unparsable URL, not shown)"},
	} {
		got := RedactDatabaseURL(tc.in)
		if got != tc.want {
			t.Errorf("RedactDatabaseURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"s3cr", "hunter2", "pw@", "sslkey", "sslpassword"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactDatabaseURL(%q) = %q shows %q", tc.in, got, secret)
			}
		}
	}
}

func TestDatabaseFlag(t *testing.T) {
	t.Setenv("CREDENTIALS_DIRECTORY", "")
	c, err := parse(t)
	if err != nil || c.Database != "" {
		t.Fatalf("default: %q %v", c.Database, err)
	}
	for _, ok := range []string{
		"postgres://tunnelsvc@db.example.com/tunnelsvc?sslmode=verify-full",
		"postgresql://u:p@db:5433/x",
		"postgres:///tunnelsvc?host=/run/postgresql",
		" postgres://db/x \n",
	} {
		if c, err := parse(t, "--database", ok); err != nil || c.Database != strings.TrimSpace(ok) {
			t.Errorf("--database %q: %q %v", ok, c.Database, err)
		}
	}
	for bad, want := range map[string]string{
		"mysql://u:hunter2@db/x":                "scheme \"mysql\" is not supported",
		"sqlite:///var/lib/x.db":                "scheme \"sqlite\"",
		"host=db user=u password=hunter2":       "scheme \"\" is not supported",
		"postgres://u:hunter2@db":               "names no database",
		"postgres://u:hunter2@db/x?sslmode=yes": "sslmode=\"yes\"",
		"postgres://u:hunt%zz@db/x":             "not a URL",
		"postgres:hunter2":                      "not a URL with a host",
	} {
		_, err := parse(t, "--database", bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--database %q: %v, want %q", bad, err, want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("--database %q: the error shows the password: %v", bad, err)
		}
	}
}

// The credential systemd passes takes the place of the variable; a flag
// still wins; a blank credential (the unit's default when
// /etc/tunnelsvc/database-url is missing) leaves the variable in charge.
func TestDatabaseCredential(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CREDENTIALS_DIRECTORY", dir)
	t.Setenv(DatabaseEnv, "postgres://env@db/fromenv")
	cred := filepath.Join(dir, DatabaseCredential)

	if c, err := parse(t); err != nil || c.Database != "postgres://env@db/fromenv" {
		t.Fatalf("no credential: %q %v", c.Database, err)
	}
	os.WriteFile(cred, []byte("\n"), 0o400)
	if c, err := parse(t); err != nil || c.Database != "postgres://env@db/fromenv" {
		t.Fatalf("blank credential: %q %v", c.Database, err)
	}
	os.Remove(cred)
	os.WriteFile(cred, []byte("  postgres://cred:pw@db/fromcred?sslmode=verify-full\n"), 0o400)
	if c, err := parse(t); err != nil || c.Database != "postgres://cred:pw@db/fromcred?sslmode=verify-full" {
		t.Fatalf("credential: %q %v", c.Database, err)
	}
	if c, err := parse(t, "--database", "postgres://flag@db/fromflag"); err != nil || c.Database != "postgres://flag@db/fromflag" {
		t.Fatalf("flag over credential: %q %v", c.Database, err)
	}
	// An invalid credential is refused, not replaced by the variable.
	os.Remove(cred)
	os.WriteFile(cred, []byte("mysql://x@db/y"), 0o400)
	if _, err := parse(t); err == nil {
		t.Fatal("an invalid credential was accepted")
	}
	// One that cannot be read is an error too.
	os.Remove(cred)
	os.Mkdir(cred, 0o700)
	if _, err := parse(t); err == nil || !strings.Contains(err.Error(), "credential database-url") {
		t.Fatalf("unreadable credential: %v", err)
	}
}

// Outside the unit (an admin command from a root shell) the file the unit
// loads the credential from is read, so the command opens the daemon's
// database; without it, SQLite as before.
func TestDatabaseCredentialFileOutsideTheUnit(t *testing.T) {
	t.Setenv("CREDENTIALS_DIRECTORY", "")
	t.Setenv(DatabaseEnv, "")
	file := filepath.Join(t.TempDir(), "database-url")
	old := credentialFile
	credentialFile = file
	t.Cleanup(func() { credentialFile = old })
	if c, err := parse(t); err != nil || c.Database != "" {
		t.Fatalf("no file: %q %v", c.Database, err)
	}
	os.WriteFile(file, []byte("postgres://cred:pw@db/tunnelsvc?sslmode=verify-full\n"), 0o600)
	if c, err := parse(t); err != nil || c.Database != "postgres://cred:pw@db/tunnelsvc?sslmode=verify-full" {
		t.Fatalf("the unit's credential file: %q %v", c.Database, err)
	}
}

// -h never prints the URL the daemon was given: it may hold a password.
func TestDatabaseHelpHidesValue(t *testing.T) {
	t.Setenv("CREDENTIALS_DIRECTORY", "")
	t.Setenv(DatabaseEnv, "postgres://u:hunter2@db/x")
	c := Default()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	Register(fs, &c)
	fs.PrintDefaults()
	if strings.Contains(out.String(), "hunter2") || !strings.Contains(out.String(), "-database") {
		t.Fatalf("help:\n%s", out.String())
	}
	if c.Database != "postgres://u:hunter2@db/x" {
		t.Fatalf("from the environment: %q", c.Database)
	}
}
