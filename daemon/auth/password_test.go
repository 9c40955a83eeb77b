package auth

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
)

// A password is stored as argon2id at RFC 9106's second recommended cost
// with 64 MiB, and a hash made at another cost (an older or a cheaper one)
// still verifies: each hash carries its parameters.
func TestPasswordHashCost(t *testing.T) {
	ctx := context.Background()
	g := NewGate(2, 1, 8)
	h, err := hashPassword(ctx, g, Ticket{}, "correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	if want := "$argon2id$v=19$m=65536,t=3,p=2$"; !strings.HasPrefix(h, want) {
		t.Fatalf("hash %q does not start with %q", h, want)
	}
	for pw, want := range map[string]bool{"correct horse battery staple": true, "correct horse battery stapl": false} {
		if ok, err := verifyPassword(ctx, g, Ticket{}, h, pw); err != nil || ok != want {
			t.Fatalf("verify %q = %v, %v; want %v", pw, ok, err, want)
		}
	}
	cheap := "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$"
	key, err := g.IDKey(ctx, Ticket{}, []byte("pw"), []byte("saltsaltsaltsalt"), 1, 1024, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := verifyPassword(ctx, g, Ticket{}, cheap+base64.RawStdEncoding.EncodeToString(key), "pw"); err != nil || !ok {
		t.Fatalf("a hash at another cost: %v, %v", ok, err)
	}
}
