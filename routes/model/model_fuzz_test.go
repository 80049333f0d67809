package model

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// FuzzModelRoute sends raw request lines through the whole proxy handler
// and checks what reaches the Anthropic upstream: only the three model
// endpoints, with their own method, the path exactly as the client sent it
// (no decoding, no dot segments, no absolute form), only the query
// parameters each endpoint takes, and the real credential in place of the
// sandbox's token. A request that is not forwarded is answered with an
// error that does not hold the credential.
func FuzzModelRoute(f *testing.F) {
	for _, s := range [][2]string{
		{"POST", "/v1/messages"},
		{"POST", "/v1/messages?beta=true"},
		{"POST", "/v1/messages/count_tokens"},
		{"GET", "/v1/models?limit=5&after_id=x"},
		{"GET", "/v1/models?limit=5&foo=1"},
		{"POST", "/v1/messages/batches"},
		{"POST", "/v1/%6dessages"},
		{"POST", "/v1/messages/../models"},
		{"POST", "/v1/./messages"},
		{"POST", "//v1/messages"},
		{"POST", "/v1/messages/"},
		{"POST", "http://evil.example/v1/messages"},
		{"GET", "/v1/models#x"},
		{"PUT", "/v1/messages"},
		{"GET", "/v1/files"},
		{"POST", "*"},
	} {
		f.Add(s[0], s[1])
	}

	const canary = "sk-ant-api03-fuzz-canary"
	type seen struct {
		method, path, rawQuery, apiKey, authz string
	}
	var (
		mu  sync.Mutex
		got []seen
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	f.Cleanup(up.Close)
	store, err := tokens.OpenBolt(filepath.Join(f.TempDir(), "cproxy.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	u, _ := url.Parse(up.URL)
	route := Kind.Build(routes.Env{Upstream: routes.Upstream{URL: u, Credential: secrets.New(canary), Auth: "api-key", HeaderTimeout: 10 * time.Second}})
	srv := routes.New(routes.Options{
		Store:  store,
		Policy: policy.DefaultPolicy(),
		Logger: slog.New(slog.DiscardHandler),
		Routes: []routes.Route{route},
	})
	f.Cleanup(srv.Close)
	minted := httptest.NewRecorder()
	admin.Handler(srv, client.Serving{}).ServeHTTP(minted, httptest.NewRequest("POST", "/tokens?sandbox=conv-1", nil))
	var created admin.TokenCreated
	if err := json.Unmarshal(minted.Body.Bytes(), &created); err != nil || created.Value == "" {
		f.Fatalf("minting a token: %d %q", minted.Code, minted.Body)
	}
	proxy := srv.ProxyHandler()
	// send serves one request line and returns the answer and what the
	// upstream saw; a nil answer is a line net/http would not pass on.
	send := func(method, target string) (*httptest.ResponseRecorder, []seen) {
		body := ""
		if method != http.MethodGet && method != http.MethodHead {
			body = hello
		}
		raw := method + " " + target + " HTTP/1.1\r\nHost: proxy.example\r\n" +
			"Authorization: Bearer " + created.Value + "\r\nAnthropic-Version: 2023-06-01\r\n" +
			"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return nil, nil
		}
		req.RemoteAddr = "127.0.0.1:40000"
		mu.Lock()
		got = nil
		mu.Unlock()
		w := httptest.NewRecorder()
		proxy.ServeHTTP(w, req)
		mu.Lock()
		defer mu.Unlock()
		return w, got
	}
	// The oracle below says nothing if nothing is ever forwarded.
	for _, s := range [][2]string{{"POST", "/v1/messages?beta=true"}, {"GET", "/v1/models?limit=5"}} {
		if w, fwd := send(s[0], s[1]); w == nil || w.Code != http.StatusOK || len(fwd) != 1 {
			f.Fatalf("%s %s was not forwarded: %v", s[0], s[1], w)
		}
	}

	f.Fuzz(func(t *testing.T, method, target string) {
		w, fwd := send(method, target)
		if w == nil {
			return // net/http's server would not have handed this to cproxy
		}
		if strings.Contains(w.Body.String(), canary) || strings.Contains(w.Body.String(), created.Value) {
			t.Fatalf("%s %s: the answer holds a credential: %q", method, target, w.Body)
		}
		if len(fwd) == 0 {
			if (method == http.MethodGet || method == http.MethodHead) && target == "/" {
				// The bare request Claude Code sends at start: a 200 that
				// says nothing of the configuration, answered by cproxy.
				if body := w.Body.String(); w.Code != http.StatusOK || (body != "cproxy\n" && body != "") {
					t.Fatalf("%s /: %d %q, want 200 and cproxy's own answer", method, w.Code, body)
				}
				return
			}
			if w.Code < 400 {
				t.Fatalf("%s %s: status %d without reaching the upstream", method, target, w.Code)
			}
			return
		}
		if len(fwd) > 1 {
			t.Fatalf("%s %s: forwarded %d times", method, target, len(fwd))
		}
		s := fwd[0]
		ep, ok := modelEndpoints[s.path]
		if !ok || s.method != ep.method || s.method != method {
			t.Fatalf("%s %s reached the upstream as %s %s", method, target, s.method, s.path)
		}
		if sent, _, _ := strings.Cut(target, "?"); sent != s.path {
			t.Fatalf("the client sent path %q, the upstream got %q", sent, s.path)
		}
		q, err := url.ParseQuery(s.rawQuery)
		if err != nil {
			t.Fatalf("%s %s: forwarded query %q does not parse", method, target, s.rawQuery)
		}
		for k := range q {
			if !slices.Contains(ep.query, k) {
				t.Fatalf("%s %s: forwarded query parameter %q", method, target, k)
			}
		}
		if s.apiKey != canary || strings.Contains(s.authz, "cpx_") {
			t.Fatalf("%s %s: upstream saw x-api-key %q and authorization %q", method, target, s.apiKey, s.authz)
		}
		if w.Code != http.StatusOK {
			t.Fatalf("%s %s: forwarded, then answered %d", method, target, w.Code)
		}
	})
}
