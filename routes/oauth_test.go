package routes

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/secrets"
)

func newTestOAuth(t *testing.T, o *OAuth, endpoint string) *testClock {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	o.Key, o.TokenURL = "mcp.docs.oauth", u
	clock := &testClock{now: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}
	o.Init(nil, clock.Now)
	return clock
}

func liveFrom(t *testing.T, source string) *secrets.Live {
	t.Helper()
	l, err := new(secrets.Loader).Live("test", secrets.Source(source), nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The client_credentials grant, with the secret in the form: one exchange
// serves requests until a quarter of the token's life (at most a minute)
// before it expires, and however many requests want a token at once, one
// exchange answers them all. Scope and resource go with each exchange.
func TestOAuthClientCredentialsRenewsBeforeExpiry(t *testing.T) {
	srv := fakes.NewOAuthServer(fakes.OAuthServerOptions{ClientID: "cproxy", ClientSecret: "s3cret", ExpiresIn: 600})
	defer srv.Close()
	t.Setenv("OAUTH_SECRET", "s3cret")
	o := &OAuth{ClientID: "cproxy", ClientSecret: liveFrom(t, "env:OAUTH_SECRET"), SecretInBody: true, Scope: "docs:read", Resource: "https://mcp.example.com/mcp"}
	clock := newTestOAuth(t, o, srv.URL)

	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			tok, err := o.Token(context.Background())
			if err != nil {
				t.Error(err)
			}
			got[i] = tok.Reveal()
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != "at_1" {
			t.Fatalf("tokens %v: want at_1 for every request", got)
		}
	}
	xs := srv.Exchanges()
	if len(xs) != 1 || xs[0].GrantType != "client_credentials" || xs[0].Scope != "docs:read" || xs[0].Resource != "https://mcp.example.com/mcp" || xs[0].Status != 200 {
		t.Fatalf("exchanges %+v: want one client_credentials exchange with scope and resource", xs)
	}
	clock.Add(8*time.Minute + 59*time.Second)
	if tok, _ := o.Token(context.Background()); tok.Reveal() != "at_1" || len(srv.Exchanges()) != 1 {
		t.Fatalf("a minute and more before expiry: %s after %d exchanges, want at_1 kept", tok.Reveal(), len(srv.Exchanges()))
	}
	clock.Add(2 * time.Second)
	if tok, _ := o.Token(context.Background()); tok.Reveal() != "at_2" {
		t.Fatalf("within a minute of expiry: %s, want a new token", tok.Reveal())
	}
}

// A token the upstream refuses with 401 is dropped, and that request told
// to retry (503, Retry-After); the next gets a new token. A 401 for a
// token already replaced does not drop the new one.
func TestOAuthRefusedTokenIsReplaced(t *testing.T) {
	srv := fakes.NewOAuthServer(fakes.OAuthServerOptions{ClientID: "cproxy", ClientSecret: "s3cret"})
	defer srv.Close()
	t.Setenv("OAUTH_SECRET", "s3cret")
	o := &OAuth{ClientID: "cproxy", ClientSecret: liveFrom(t, "env:OAUTH_SECRET")}
	newTestOAuth(t, o, srv.URL)
	refusedWith := func(token string) error {
		req, _ := http.NewRequest("POST", "http://mcp.example/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return o.CheckResponse(&http.Response{StatusCode: 401, Request: req}, "the MCP server docs")
	}
	first, _ := o.Token(context.Background())
	err := refusedWith(first.Reveal())
	h := http.Header{}
	if !errors.Is(err, ErrUnavailable) || !SetRetryAfter(h, err) || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("refusal %v (Retry-After %q): want 503 with a retry", err, h.Get("Retry-After"))
	}
	second, _ := o.Token(context.Background())
	if second.Reveal() != "at_2" {
		t.Fatalf("after a 401: %s, want at_2", second.Reveal())
	}
	refusedWith(first.Reveal())
	if third, _ := o.Token(context.Background()); third != second {
		t.Fatalf("a late 401 for the old token replaced the new one")
	}
}

// A client the endpoint does not know: refused naming the key to fix, and
// answered from memory for a few seconds rather than asking the endpoint
// at every request.
func TestOAuthFailureIsNamedAndNotHammered(t *testing.T) {
	srv := fakes.NewOAuthServer(fakes.OAuthServerOptions{ClientID: "cproxy", ClientSecret: "right"})
	defer srv.Close()
	t.Setenv("OAUTH_SECRET", "wrong")
	o := &OAuth{ClientID: "cproxy", ClientSecret: liveFrom(t, "env:OAUTH_SECRET")}
	clock := newTestOAuth(t, o, srv.URL)
	for range 3 {
		_, err := o.Token(context.Background())
		if !errors.Is(err, ErrUnavailable) || err.Error() != "cproxy: mcp.docs.oauth: the token endpoint answered 401 (invalid_client); the operator must act: check mcp.docs.oauth's client_id and client_secret" {
			t.Fatalf("error %v", err)
		}
		if strings.Contains(err.Error(), "wrong") {
			t.Fatal("the error holds the secret")
		}
	}
	if n := len(srv.Exchanges()); n != 1 {
		t.Fatalf("%d exchanges for three requests in a moment, want 1", n)
	}
	clock.Add(oauthRetry)
	o.Token(context.Background())
	if n := len(srv.Exchanges()); n != 2 {
		t.Fatalf("%d exchanges after the retry time, want 2", n)
	}
}

// A refresh token the endpoint rotates is used from then on: written back
// to a file: source (whole, mode 0600), held in memory for an env: one.
func TestOAuthRotatedRefreshToken(t *testing.T) {
	for _, kind := range []string{"file", "env"} {
		t.Run(kind, func(t *testing.T) {
			srv := fakes.NewOAuthServer(fakes.OAuthServerOptions{ClientID: "cproxy", RefreshToken: "rt_0", Rotate: true})
			defer srv.Close()
			path := filepath.Join(t.TempDir(), "refresh.token")
			source := "file:" + path
			if kind == "env" {
				t.Setenv("OAUTH_REFRESH", "rt_0")
				source = "env:OAUTH_REFRESH"
			} else if err := os.WriteFile(path, []byte("rt_0\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			o := &OAuth{ClientID: "cproxy", RefreshToken: liveFrom(t, source)}
			newTestOAuth(t, o, srv.URL)
			for i := range 3 {
				if _, err := o.Token(context.Background()); err != nil {
					t.Fatalf("exchange %d: %v", i+1, err)
				}
				o.mu.Lock()
				o.access = secrets.Secret{}
				o.mu.Unlock()
			}
			xs := srv.Exchanges()
			if len(xs) != 3 || xs[0].RefreshToken != "rt_0" || xs[1].RefreshToken != "rt_1" || xs[2].RefreshToken != "rt_2" {
				t.Fatalf("exchanges %+v: want each with the token the last one rotated to", xs)
			}
			if kind == "file" {
				st, err := os.Stat(path)
				b, _ := os.ReadFile(path)
				if err != nil || string(b) != "rt_3\n" || st.Mode().Perm() != 0o600 {
					t.Fatalf("the file holds %q (mode %v), want rt_3 at 0600", b, st.Mode().Perm())
				}
			}
		})
	}
}
