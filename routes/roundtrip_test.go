package routes

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/secrets"
)

// TestForwarderRoundTrip: a route's own request to its upstream goes to the
// upstream's base path joined with the target, carries the header and body
// given and the upstream's credential (or the target's own), and is bounded
// by the upstream's header_timeout.
func TestForwarderRoundTrip(t *testing.T) {
	type seen struct {
		method, uri, auth, accept, body string
		length                          int64
	}
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/base/slow" {
			<-r.Context().Done() // never answers: the header timeout must end it
			return
		}
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Accept"), string(b), r.ContentLength}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL + "/base/")
	setCred := func(h http.Header, c secrets.Secret) { h.Set("Authorization", "Bearer "+c.Reveal()) }
	f := NewForwarder(Upstream{URL: u, Credential: secrets.New("canary-roundtrip"), HeaderTimeout: 200 * time.Millisecond}, setCred, nil)
	defer f.Close()

	for _, tc := range []struct {
		name   string
		method string
		t      Target
		header http.Header
		body   []byte
		want   seen
	}{
		{"a GET without a body", http.MethodGet, Target{Path: "/@a/b", RawPath: "/@a%2fb"}, http.Header{"Accept": {"application/json"}}, nil,
			seen{http.MethodGet, "/base/@a%2fb", "Bearer canary-roundtrip", "application/json", "", 0}},
		{"a POST with a body", http.MethodPost, Target{Path: "/graphql"}, http.Header{"Content-Type": {"application/json"}}, []byte(`{"query":"{x}"}`),
			seen{http.MethodPost, "/base/graphql", "Bearer canary-roundtrip", "", `{"query":"{x}"}`, 15}},
		{"the target's own credential", http.MethodPost, Target{Path: "/graphql", Credential: secrets.New("canary-minted")}, nil, []byte("{}"),
			seen{http.MethodPost, "/base/graphql", "Bearer canary-minted", "", "{}", 2}},
	} {
		resp, err := f.RoundTrip(context.Background(), tc.method, tc.t, tc.header, tc.body)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if s := <-got; string(body) != "ok" || s != tc.want {
			t.Fatalf("%s: the upstream saw %+v and answered %q, want %+v", tc.name, s, body, tc.want)
		}
	}

	// The test's own bound, far past the header timeout, so that a
	// RoundTrip without one fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := f.RoundTrip(ctx, http.MethodGet, Target{Path: "/slow"}, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("an upstream that does not answer: %v, want the header timeout", err)
	}
	if strings.Contains(err.Error(), "canary") {
		t.Fatalf("the error names the credential: %v", err)
	}
}
