package routes

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/cproxy/cproxy/secrets"
)

// TestForwarderRoundTrip: a route's own request to its upstream goes to the
// upstream's base path joined with the target, carries the header given and
// the upstream's credential, and is bounded by the upstream's
// header_timeout.
func TestForwarderRoundTrip(t *testing.T) {
	type seen struct{ uri, auth, accept string }
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/base/slow" {
			<-r.Context().Done() // never answers: the header timeout must end it
			return
		}
		got <- seen{r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Accept")}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL + "/base/")
	setCred := func(h http.Header, c secrets.Secret) { h.Set("Authorization", "Bearer "+c.Reveal()) }
	f := NewForwarder(Upstream{URL: u, Credential: secrets.New("canary-roundtrip"), HeaderTimeout: 200 * time.Millisecond}, setCred, nil)
	defer f.Close()

	resp, err := f.RoundTrip(context.Background(), http.MethodGet, Target{Path: "/@a/b", RawPath: "/@a%2fb"}, http.Header{"Accept": {"application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if s := <-got; string(body) != "ok" || s != (seen{"/base/@a%2fb", "Bearer canary-roundtrip", "application/json"}) {
		t.Fatalf("the upstream saw %+v and answered %q", s, body)
	}

	// The test's own bound, far past the header timeout, so that a
	// RoundTrip without one fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.RoundTrip(ctx, http.MethodGet, Target{Path: "/slow"}, nil); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("an upstream that does not answer: %v, want the header timeout", err)
	}
}
