package auth

import (
	"unicode/utf8"

	"github.com/nbutton23/zxcvbn-go"
)

// Password rules at setup and reset.
const (
	MinPasswordChars = 8
	MaxPasswordBytes = 1024
	// MinPasswordScore is the lowest zxcvbn score (0..4) accepted: 2 means
	// "somewhat guessable", out of reach of online guessing under our rate limit
	// and of the common-password lists.
	MinPasswordScore = 2
	// zxcvbn's matching grows quickly with length; a long prefix already
	// scores 4 when it is strong, so the rest adds nothing to the verdict.
	scoredPrefixBytes = 100
)

// PolicyError is a password rule violation; its text is shown to the user.
type PolicyError string

func (e PolicyError) Error() string { return string(e) }

// CheckPassword applies the password rules.
func CheckPassword(pw string) error {
	if len(pw) > MaxPasswordBytes {
		return PolicyError("password must be at most 1024 bytes")
	}
	if utf8.RuneCountInString(pw) < MinPasswordChars {
		return PolicyError("password must be at least 8 characters")
	}
	scored := pw
	if len(scored) > scoredPrefixBytes {
		scored = scored[:scoredPrefixBytes]
	}
	if zxcvbn.PasswordStrength(scored, []string{"tunnelsvc", "tunnel", "admin", "dashboard"}).Score < MinPasswordScore {
		return PolicyError("password is too easy to guess: use a longer passphrase of unrelated words")
	}
	return nil
}
