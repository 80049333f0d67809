package fakes

import (
	"bytes"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The fake App takes only a JWT GitHub would: signed RS256 with the App's
// key, iss the App's id, iat present and exp at most ten minutes after it;
// and it mints only tokens narrowed to named repositories.
func TestGitHubAppChecksTheJWT(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	gs, err := NewGitServer(t.TempDir(), GitServerOptions{Token: "ghs_fake"})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	if err := gs.CreateRepo("acme/app"); err != nil {
		t.Fatal(err)
	}
	key, _, err := NewAppKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := NewAppKey()
	if err != nil {
		t.Fatal(err)
	}
	app := NewGitHubApp(GitHubAppOptions{AppID: 7, Key: key, Installation: 9, Account: "acme", Git: gs})
	defer app.Close()
	now := time.Now()
	sign := func(iss string, iat, exp time.Time, k any) string {
		claims := jwt.RegisteredClaims{Issuer: iss, IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(exp)}
		s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := sign("7", now.Add(-time.Minute), now.Add(9*time.Minute), key)
	for _, tc := range []struct {
		name, jwt, body string
		status          int
	}{
		{"a good JWT", good, `{"repositories":["app"],"permissions":{"contents":"read"}}`, http.StatusCreated},
		{"another key", sign("7", now.Add(-time.Minute), now.Add(9*time.Minute), other), `{"repositories":["app"],"permissions":{"contents":"read"}}`, http.StatusUnauthorized},
		{"another iss", sign("8", now.Add(-time.Minute), now.Add(9*time.Minute), key), `{"repositories":["app"],"permissions":{"contents":"read"}}`, http.StatusUnauthorized},
		{"exp over ten minutes on", sign("7", now.Add(-time.Minute), now.Add(10*time.Minute), key), `{"repositories":["app"],"permissions":{"contents":"read"}}`, http.StatusUnauthorized},
		{"expired", sign("7", now.Add(-11*time.Minute), now.Add(-time.Minute), key), `{"repositories":["app"],"permissions":{"contents":"read"}}`, http.StatusUnauthorized},
		{"every repository", good, `{"permissions":{"contents":"read"}}`, http.StatusUnprocessableEntity},
		{"another permission", good, `{"repositories":["app"],"permissions":{"administration":"write"}}`, http.StatusUnprocessableEntity},
		{"a repository it lacks", good, `{"repositories":["nope"],"permissions":{"contents":"read"}}`, http.StatusUnprocessableEntity},
	} {
		req, _ := http.NewRequest(http.MethodPost, app.URL+"/app/installations/9/access_tokens", bytes.NewReader([]byte(tc.body)))
		req.Header.Set("Authorization", "Bearer "+tc.jwt)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	if n := len(app.Mints()); n != 1 {
		t.Errorf("mints: %d, want 1", n)
	}
}
