package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	pqtotp "github.com/pquerna/otp/totp"
)

// TestCodeGuessingFromOneSlash64: issue 12's observation replayed against
// the built daemon. The password is known; wrong codes for one pending
// login come from ever new addresses of one IPv6 /64 through the local
// proxy. None succeeds, at most 10 are checked, the rest get 429, and the
// pending login is dead afterwards.
func TestCodeGuessingFromOneSlash64(t *testing.T) {
	d := startDaemon(t)
	c := &http.Client{Timeout: 30 * time.Second}
	r := call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	session := map[string]string{"Cookie": strings.SplitN(r.header.Get("Set-Cookie"), ";", 2)[0]}
	r = call(t, c, "POST", d.base+"/api/auth/2fa/enroll", "", session)
	secret, _ := data(r)["secret"].(string)
	code, err := pqtotp.GenerateCode(secret, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := call(t, c, "POST", d.base+"/api/auth/2fa/confirm", `{"code":"`+code+`","name":"phone"}`, session); r.status != 200 {
		t.Fatalf("confirm: %d %v", r.status, r.body)
	}

	from := func(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }
	r = call(t, c, "POST", d.base+"/api/auth/login", `{"password":"`+password+`"}`, from("2001:db8:77:1::1"))
	pending, _ := data(r)["pending_token"].(string)
	if pending == "" {
		t.Fatalf("login: %d %v", r.status, r.body)
	}
	statuses := map[int]int{}
	for i := range 200 {
		guess := fmt.Sprintf("%06d", (i*7919)%1000000)
		body, _ := json.Marshal(map[string]string{"pending_token": pending, "code": guess})
		r := call(t, c, "POST", d.base+"/api/auth/login/2fa", string(body), from(fmt.Sprintf("2001:db8:77:1:%x::%x", i, i+2)))
		statuses[r.status]++
		if r.status == 429 && r.header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if statuses[200] != 0 || statuses[401] > 10 || statuses[401]+statuses[429] != 200 {
		t.Fatalf("200 guesses from one /64: %v; want no 200, at most 10 × 401, the rest 429", statuses)
	}
	// The pending login is dead even for its owner with the right code
	// (once the /64's lockout is over; here another /64 shows it).
	next, _ := pqtotp.GenerateCode(secret, time.Now().Add(30*time.Second))
	body, _ := json.Marshal(map[string]string{"pending_token": pending, "code": next})
	if r := call(t, c, "POST", d.base+"/api/auth/login/2fa", string(body), from("2001:db8:78::1")); r.status != 401 {
		t.Fatalf("the pending login after the guesses: %d %v", r.status, r.body)
	}
}
