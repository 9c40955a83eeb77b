package auth

import (
	"errors"
	"runtime"
	"testing"
)

func TestCheckPassword(t *testing.T) {
	cases := []struct {
		pw, want string // want "" when accepted
	}{
		{"short", "password must be at least 8 characters"},
		{"password123", "password is too easy to guess: use a longer passphrase of unrelated words"},
		{"tunnelsvc2024", "password is too easy to guess: use a longer passphrase of unrelated words"},
		{"correct horse battery staple", ""},
	}
	// Twice, with a collection between: the dictionaries are rebuilt after
	// the collector freed them, and give the same verdicts.
	for round := range 2 {
		for _, c := range cases {
			err := CheckPassword(c.pw)
			var pe PolicyError
			switch {
			case c.want == "" && err != nil:
				t.Errorf("round %d: CheckPassword(%q) = %v, want accepted", round, c.pw, err)
			case c.want != "" && (!errors.As(err, &pe) || err.Error() != c.want):
				t.Errorf("round %d: CheckPassword(%q) = %v, want %q", round, c.pw, err, c.want)
			}
		}
		runtime.GC()
	}
}

// The password dictionaries (about 6 MB once built) are used at setup and
// at a password change, a few times in a daemon's life: an idle daemon
// must not hold them.
func TestCheckPasswordKeepsNoDictionaries(t *testing.T) {
	if err := CheckPassword("correct horse battery staple"); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > 3<<20 {
		t.Errorf("live heap after a password check and a collection: %.1f MB, want under 3 MB (the dictionaries were kept)", float64(m.HeapAlloc)/(1<<20))
	}
}
