package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/tokens"
)

func newClient(t *testing.T) *client.Client {
	t.Helper()
	adminURL, stop := startCproxy()
	t.Cleanup(stop)
	c, err := client.New(adminURL + "/") // a trailing slash is fine
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// apiError asserts err is a *client.Error with that status and a message
// that contains want.
func apiError(t *testing.T, err error, status int, want string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want a *client.Error", err, err)
	}
	if e.StatusCode != status || !strings.Contains(e.Message, want) {
		t.Fatalf("err = %d %q, want %d and a message with %q", e.StatusCode, e.Message, status, want)
	}
	if !strings.Contains(e.Error(), fmt.Sprintf("(HTTP %d)", status)) {
		t.Errorf("Error() = %q, want the status in it", e.Error())
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:9001", "ftp://127.0.0.1:9001", "http://", "http://127.0.0.1:9001?x=1", "://", "unix:", "unix:/run/a\x00b"} {
		if _, err := client.New(u); err == nil || !strings.Contains(err.Error(), "invalid admin URL") {
			t.Errorf("New(%q) = %v, want an invalid admin URL error", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:9001", "https://cproxy.internal:9001/", "http://[::1]:9001", "unix:/run/cproxy/admin.sock", "unix:admin.sock"} {
		if _, err := client.New(u); err != nil {
			t.Errorf("New(%q) = %v", u, err)
		}
	}
}

func TestCreateTokenDefaults(t *testing.T) {
	c := newClient(t)
	before := time.Now()
	tok, err := c.CreateToken(context.Background(), "conv-1", client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Reveal(), "cpx_") || len(tok.Reveal()) != 53 || tok.Secret.IsZero() {
		t.Errorf("token %q is not a cproxy token", tok.Reveal())
	}
	if !strings.HasPrefix(tok.ID, "tok_") || tok.Sandbox != "conv-1" || tok.Profile != "" || tok.Source != "" || tok.Bind != "" || tok.Values != nil {
		t.Errorf("token = %+v", tok)
	}
	if d := tok.ExpiresAt.Sub(before); d < 24*time.Hour-time.Minute || d > 24*time.Hour+time.Minute {
		t.Errorf("expires in %s, want cproxy's default 24h", d)
	}
	other, err := c.CreateToken(context.Background(), "conv-1", client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Reveal() == tok.Reveal() || other.ID == tok.ID {
		t.Errorf("a second call gave the same token")
	}
}

func TestCreateTokenOptions(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	before := time.Now()
	tok, err := c.CreateToken(ctx, "conv-2", client.CreateOptions{
		Profile: "web",
		TTL:     7 * 24 * time.Hour, // sent as 7d
		Source:  "10.20.0.0/16",
		Values:  map[string]string{"mod_token": "mod_value"},
		Budget:  &client.Budget{OutputTokens: 200000, Window: "day"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Profile != "web" || tok.Source != "10.20.0.0/16" || fmt.Sprint(tok.Values) != "[mod_token]" {
		t.Errorf("token = %+v", tok)
	}
	if d := tok.ExpiresAt.Sub(before); d < 7*24*time.Hour-time.Minute || d > 7*24*time.Hour+time.Minute {
		t.Errorf("expires in %s, want 7d", d)
	}
	short, err := c.CreateToken(ctx, "conv-2", client.CreateOptions{TTL: 90 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d := short.ExpiresAt.Sub(before); d < 89*time.Minute || d > 91*time.Minute {
		t.Errorf("expires in %s, want 90m", d)
	}

	infos, err := c.List(ctx, "conv-2")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 {
		t.Fatalf("List = %+v, want 2 tokens", infos)
	}
	first, second := infos[0], infos[1]
	if first.ID != tok.ID {
		first, second = second, first
	}
	if first.ID != tok.ID || first.Profile != "web" || first.Source != "10.20.0.0/16" || first.State != client.StateLive || !first.RevokedAt.IsZero() {
		t.Errorf("first = %+v", first)
	}
	if first.Budget == nil || first.Budget.OutputTokens != 200000 || first.Budget.Window != "day" {
		t.Errorf("budget = %+v, want output_tokens 200000 a day", first.Budget)
	}
	if first.Usage == nil || first.Usage.Requests != 0 {
		t.Errorf("usage = %+v, want a zero usage", first.Usage)
	}
	if second.ID != short.ID || second.Budget != nil {
		t.Errorf("second = %+v", second)
	}
}

func TestCreateTokenRefusals(t *testing.T) {
	c := newClient(t)
	for _, tc := range []struct {
		name, sandbox string
		opts          client.CreateOptions
		status        int
		want          string
	}{
		{"no sandbox", "", client.CreateOptions{}, 400, "cproxy: missing sandbox"},
		{"bad sandbox", "-x", client.CreateOptions{}, 400, `cproxy: invalid sandbox id "-x"`},
		{"unknown profile", "conv-3", client.CreateOptions{Profile: "nope"}, 400, `profile "nope" is not defined in the policy`},
		{"ttl too long", "conv-3", client.CreateOptions{TTL: 400 * 24 * time.Hour}, 400, "ttl 400d is out of range"},
		{"ttl too short", "conv-3", client.CreateOptions{TTL: time.Millisecond}, 400, "is out of range"},
		{"bad source", "conv-3", client.CreateOptions{Source: "10.20.30.5/16"}, 400, "has bits set past its length"},
		{"bad bind", "conv-3", client.CreateOptions{Bind: "vsock"}, 400, `invalid bind "vsock"`},
		{"no sockets", "conv-3", client.CreateOptions{Bind: client.BindSocket}, 400, "bind=socket needs listen.sandbox_sockets"},
		{"unknown value", "conv-3", client.CreateOptions{Values: map[string]string{"hub_token": "x"}}, 400, `no relay uses a value named "hub_token" (the config's relays use: mod_token)`},
		{"control character", "conv-3", client.CreateOptions{Values: map[string]string{"mod_token": "a\nb"}}, 400, "holds a control character"},
		{"bad budget", "conv-3", client.CreateOptions{Budget: &client.Budget{Window: "week"}}, 400, "week"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := c.CreateToken(context.Background(), tc.sandbox, tc.opts)
			apiError(t, err, tc.status, tc.want)
			if !tok.Secret.IsZero() {
				t.Errorf("a refusal returned a token")
			}
		})
	}
	// None of them left a token behind.
	infos, err := c.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("List = %+v, want none", infos)
	}
}

func TestRevoke(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	for _, s := range []string{"conv-4", "conv-4", "conv-5"} {
		if _, err := c.CreateToken(ctx, s, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Second)
	if err := c.Revoke(ctx, "conv-4"); err != nil {
		t.Fatal(err)
	}
	// Twice, and a sandbox with no token: not an error.
	if err := c.Revoke(ctx, "conv-4"); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
	if err := c.Revoke(ctx, "never-seen"); err != nil {
		t.Fatalf("revoke of an unknown sandbox: %v", err)
	}
	infos, err := c.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string][]string{}
	for _, in := range infos {
		states[in.Sandbox] = append(states[in.Sandbox], in.State)
		if in.State == client.StateRevoked && in.RevokedAt.Before(before) {
			t.Errorf("%s revoked at %s", in.ID, in.RevokedAt)
		}
	}
	if got := fmt.Sprint(states); got != "map[conv-4:[revoked revoked] conv-5:[live]]" {
		t.Errorf("states = %s", got)
	}
	// A new token after revocation is live: how a sandbox wakes.
	if _, err := c.CreateToken(ctx, "conv-4", client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	infos, _ = c.List(ctx, "conv-4")
	live := 0
	for _, in := range infos {
		if in.State == client.StateLive {
			live++
		}
	}
	if len(infos) != 3 || live != 1 {
		t.Errorf("after a new token: %+v", infos)
	}

	apiError(t, c.Revoke(ctx, ""), 400, "missing sandbox")
	apiError(t, c.Revoke(ctx, "Conv_4"), 400, "invalid sandbox id")
}

func TestList(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	infos, err := c.List(ctx, "")
	if err != nil || len(infos) != 0 {
		t.Fatalf("List on an empty store = %v, %v", infos, err)
	}
	infos, err = c.List(ctx, "conv-6")
	if err != nil || len(infos) != 0 {
		t.Fatalf("List of an unknown sandbox = %v, %v", infos, err)
	}
	_, err = c.List(ctx, "-bad")
	apiError(t, err, 400, `invalid sandbox id "-bad"`)
}

func TestListPage(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	minted := map[string]string{} // id: sandbox
	for i := range 7 {
		tok, err := c.CreateToken(ctx, fmt.Sprintf("conv-p%d", i%2), client.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		minted[tok.ID] = tok.Sandbox
	}
	if err := c.Revoke(ctx, "conv-p1"); err != nil {
		t.Fatal(err)
	}
	walk := func(opts client.ListOptions) []client.TokenInfo {
		var all []client.TokenInfo
		for pages := 0; ; pages++ {
			page, err := c.ListPage(ctx, opts)
			if err != nil {
				t.Fatalf("ListPage(%+v): %v", opts, err)
			}
			if opts.Limit > 0 && len(page.Tokens) > opts.Limit || pages > 10 {
				t.Fatalf("ListPage(%+v) = %d tokens, page %d", opts, len(page.Tokens), pages)
			}
			all = append(all, page.Tokens...)
			if page.Next == "" {
				return all
			}
			opts.Cursor = page.Next
		}
	}
	all := walk(client.ListOptions{Limit: 2})
	if len(all) != 7 {
		t.Fatalf("pages of 2: %d tokens, want 7", len(all))
	}
	for i, info := range all {
		if minted[info.ID] != info.Sandbox || i > 0 && all[i-1].ID >= info.ID {
			t.Errorf("token %d: %+v (the one before: %s)", i, info, all[i-1].ID)
		}
	}
	for _, f := range []struct {
		opts client.ListOptions
		want int
	}{
		{client.ListOptions{Sandbox: "conv-p0"}, 4},
		{client.ListOptions{State: client.StateRevoked, Limit: 1}, 3},
		{client.ListOptions{Sandbox: "conv-p0", State: client.StateLive, Limit: 3}, 4},
		{client.ListOptions{Sandbox: "conv-p1", State: client.StateLive}, 0},
	} {
		got := walk(f.opts)
		for _, info := range got {
			if f.opts.Sandbox != "" && info.Sandbox != f.opts.Sandbox || f.opts.State != "" && info.State != f.opts.State {
				t.Errorf("ListPage(%+v) listed %+v", f.opts, info)
			}
		}
		if len(got) != f.want {
			t.Errorf("ListPage(%+v): %d tokens, want %d", f.opts, len(got), f.want)
		}
	}
	_, err := c.ListPage(ctx, client.ListOptions{Limit: client.MaxListLimit + 1})
	apiError(t, err, 400, `invalid limit "1001": a whole number from 1 to 1000`)
	_, err = c.ListPage(ctx, client.ListOptions{State: "dead"})
	apiError(t, err, 400, `invalid state "dead": live, expired or revoked`)
	_, err = c.ListPage(ctx, client.ListOptions{Cursor: "page-2"})
	apiError(t, err, 400, `invalid cursor "page-2"`)
}

// List follows the pages: it returns every token, past a page's most.
func TestListEveryPage(t *testing.T) {
	adminURL, store, stop := startCproxyStore()
	t.Cleanup(stop)
	c, err := client.New(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	const n = client.MaxListLimit*2 + 1
	recs := map[tokens.Hash]tokens.Record{}
	now := time.Now()
	for i := range n {
		recs[tokens.Hash{byte(i >> 8), byte(i), 1}] = tokens.Record{Sandbox: "conv-many", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	}
	if err := store.CreateAll(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	infos, err := c.List(context.Background(), "conv-many")
	if err != nil || len(infos) != n {
		t.Fatalf("List = %d tokens, %v; want %d", len(infos), err, n)
	}
}

func TestHealth(t *testing.T) {
	c := newClient(t)
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Serving says which config and listeners the cproxy that answered has.
func TestServing(t *testing.T) {
	adminURL, stop := startCproxy()
	defer stop()
	c, err := client.New(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Serving(context.Background())
	want := client.Serving{Config: testConfig, Admin: strings.TrimPrefix(adminURL, "http://"), Proxy: testProxy, PID: os.Getpid()}
	if err != nil || got != want {
		t.Errorf("Serving = %+v, %v; want %+v", got, err, want)
	}
}

// RevokeToken revokes one token and no other, again without an error; an
// id no token has is a 404.
func TestRevokeToken(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	leaked, err := c.CreateToken(ctx, "conv-4", client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sibling, err := c.CreateToken(ctx, "conv-4", client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeToken(ctx, leaked.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeToken(ctx, leaked.ID); err != nil {
		t.Fatalf("revoking it again: %v", err)
	}
	infos, err := c.List(ctx, "conv-4")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		want := map[string]string{leaked.ID: client.StateRevoked, sibling.ID: client.StateLive}[in.ID]
		if in.State != want {
			t.Errorf("%s is %s, want %s", in.ID, in.State, want)
		}
	}
	apiError(t, c.RevokeToken(ctx, "tok_000000000000"), 404, "no token has the id tok_000000000000")
	apiError(t, c.RevokeToken(ctx, "conv-4"), 400, `invalid token id "conv-4"`)
	apiError(t, c.RevokeToken(ctx, "tok_/../x"), 400, "only plain paths")
	if err := c.RevokeToken(ctx, ""); err == nil || !strings.Contains(err.Error(), "no token id") {
		t.Errorf("RevokeToken(\"\") = %v", err)
	}
}

func TestReady(t *testing.T) {
	adminURL, store, stop := startCproxyStore()
	defer stop()
	c, err := client.New(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A store that fails its look-up: 503, saying which check and the fix.
	store.Close()
	apiError(t, c.Ready(context.Background()), 503, "cproxy: not ready: the token store failed a look-up")
	if err := c.Health(context.Background()); err != nil {
		t.Errorf("Health of a process that answers = %v", err)
	}
}

// A URL that is not cproxy's admin API: an *Error with the status, saying
// so, and nothing decoded.
func TestNotCproxy(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokens" {
			w.Write([]byte("<html>hello</html>"))
			return
		}
		http.NotFound(w, r)
	}))
	defer other.Close()
	c, err := client.New(other.URL)
	if err != nil {
		t.Fatal(err)
	}
	apiError(t, c.Health(context.Background()), 404, "GET /healthz at "+other.URL+" answered 404 Not Found, not as cproxy's admin API does")
	_, err = c.List(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "is not the admin API's") {
		t.Errorf("List = %v, want a decoding error", err)
	}
	_, err = c.CreateToken(context.Background(), "conv-7", client.CreateOptions{})
	apiError(t, err, 200, "POST /tokens")
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Health(context.Background())
	var e *client.Error
	var opErr *net.OpError
	if err == nil || errors.As(err, &e) || !errors.As(err, &opErr) {
		t.Fatalf("Health = %v, want a connection error that is not a *client.Error", err)
	}
}

// A unix: admin URL reaches the admin API on its socket, as cproxy serve
// listens with listen.admin = "unix:PATH", with the client's own transport
// or with a caller's *http.Client that has none.
func TestUnixSocket(t *testing.T) {
	adminURL, stop := startCproxyUnix()
	defer stop()
	ctx := context.Background()
	for _, opts := range [][]client.Option{nil, {client.WithHTTPClient(&http.Client{Timeout: 5 * time.Second})}} {
		c, err := client.New(adminURL, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Health(ctx); err != nil {
			t.Fatalf("Health = %v", err)
		}
		if err := c.Ready(ctx); err != nil {
			t.Fatalf("Ready = %v", err)
		}
		tok, err := c.CreateToken(ctx, "conv-9", client.CreateOptions{Profile: "web"})
		if err != nil || !strings.HasPrefix(tok.Reveal(), "cpx_") || tok.Sandbox != "conv-9" {
			t.Fatalf("CreateToken = %+v, %v", tok, err)
		}
		if err := c.Revoke(ctx, "conv-9"); err != nil {
			t.Fatalf("Revoke = %v", err)
		}
		infos, err := c.List(ctx, "conv-9")
		if err != nil || !slices.ContainsFunc(infos, func(i client.TokenInfo) bool { return i.ID == tok.ID && i.State == client.StateRevoked }) {
			t.Fatalf("List = %+v, %v; want %s revoked", infos, err, tok.ID)
		}
		_, err = c.CreateToken(ctx, "conv-9", client.CreateOptions{Profile: "nope"})
		apiError(t, err, 400, `cproxy: profile "nope" is not defined in the policy`)
	}
}

// A socket nobody listens on: a connection error that names the socket,
// not the placeholder host of the requests.
func TestUnixSocketUnreachable(t *testing.T) {
	gone := "unix:/nonexistent/cproxy-admin.sock"
	c, err := client.New(gone)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Health(context.Background())
	var opErr *net.OpError
	if !errors.As(err, &opErr) || !strings.Contains(err.Error(), gone+"/healthz") || strings.Contains(err.Error(), "localhost") {
		t.Fatalf("Health = %v, want a connection error naming %s", err, gone)
	}
}

func TestContextAndHTTPClient(t *testing.T) {
	adminURL, stop := startCproxy()
	defer stop()
	used := false
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	c, err := client.New(adminURL, client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(context.Background()); err != nil || !used {
		t.Fatalf("Health = %v, custom client used: %v", err, used)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.CreateToken(ctx, "conv-8", client.CreateOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("CreateToken with a cancelled context = %v", err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The token never shows up when a Token or its Secret is printed, logged
// or encoded.
func TestSecretRedacts(t *testing.T) {
	c := newClient(t)
	tok, err := c.CreateToken(context.Background(), "conv-9", client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret := tok.Reveal()
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%p", "%d", "%T"} {
		fmt.Fprintf(&out, verb+"\n", tok)
		fmt.Fprintf(&out, verb+"\n", tok.Secret)
		fmt.Fprintf(&out, verb+"\n", &tok)
	}
	fmt.Fprintln(&out, tok, tok.Secret)
	out.WriteString(fmt.Errorf("wrapped: %v", tok).Error())
	b, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	out.Write(b)
	if !strings.Contains(string(b), `"token":"REDACTED"`) {
		t.Errorf("JSON = %s", b)
	}
	slog.New(slog.NewTextHandler(&out, nil)).Info("minted", "token", tok, "secret", tok.Secret)
	slog.New(slog.NewJSONHandler(&out, nil)).Info("minted", "token", tok, "secret", tok.Secret)
	if strings.Contains(out.String(), secret) || strings.Contains(out.String(), secret[4:20]) {
		t.Fatalf("the token leaked:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "REDACTED") {
		t.Errorf("no REDACTED in:\n%s", out.String())
	}
	if (client.Secret{}).Reveal() != "" || !(client.Secret{}).IsZero() {
		t.Errorf("the zero Secret is not empty")
	}
}

// A Token decodes from the admin API's answer to POST /tokens, the token
// itself included, so that a harness that calls the API another way (or
// the CLI, through this package) holds it as a Secret too.
func TestTokenDecodes(t *testing.T) {
	answer := `{"token": "cpx_decoded", "id": "tok_1", "sandbox": "conv-1", "expires_at": "2026-01-02T03:04:05Z", "socket": "/run/s"}`
	var tok client.Token
	if err := json.Unmarshal([]byte(answer), &tok); err != nil {
		t.Fatal(err)
	}
	if tok.Reveal() != "cpx_decoded" || tok.ID != "tok_1" || tok.Sandbox != "conv-1" || tok.Socket != "/run/s" || tok.ExpiresAt.Year() != 2026 {
		t.Errorf("decoded %+v (token %q)", tok, tok.Reveal())
	}
	if b, _ := json.Marshal(tok); strings.Contains(string(b), "cpx_decoded") {
		t.Errorf("re-encoded, the token shows: %s", b)
	}
	if err := json.Unmarshal([]byte(`{"token": 42}`), &tok); err == nil {
		t.Errorf("a token that is not a string decoded")
	}
}

func TestPrune(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	for _, s := range []string{"conv-7", "conv-8"} {
		if _, err := c.CreateToken(ctx, s, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Revoke(ctx, "conv-7"); err != nil {
		t.Fatal(err)
	}
	// This cproxy keeps every token (store.retention 0): an age is needed.
	_, err := c.Prune(ctx, client.PruneOptions{})
	apiError(t, err, 400, "older_than=")

	dry, err := c.Prune(ctx, client.PruneOptions{DryRun: true, OlderThan: time.Nanosecond})
	if err != nil || !dry.DryRun || dry.Count != 1 || len(dry.Tokens) != 1 || dry.Tokens[0].Sandbox != "conv-7" ||
		dry.Tokens[0].State != client.StateRevoked || dry.Before.IsZero() {
		t.Fatalf("dry run = %+v, %v; want conv-7's revoked token", dry, err)
	}
	if infos, _ := c.List(ctx, "conv-7"); len(infos) != 1 {
		t.Fatalf("a dry run deleted: %+v", infos)
	}
	// AllDead asks for older_than=0s: the token revoked a moment ago.
	all, err := c.Prune(ctx, client.PruneOptions{DryRun: true, AllDead: true, OlderThan: 24 * time.Hour})
	if err != nil || all.Count != 1 || len(all.Tokens) != 1 || all.Tokens[0].Sandbox != "conv-7" {
		t.Fatalf("dry run of every dead token = %+v, %v; want conv-7's revoked token", all, err)
	}
	done, err := c.Prune(ctx, client.PruneOptions{OlderThan: time.Nanosecond})
	if err != nil || done.DryRun || done.Count != 1 || done.Tokens != nil {
		t.Fatalf("prune = %+v, %v; want 1", done, err)
	}
	infos, err := c.List(ctx, "")
	if err != nil || len(infos) != 1 || infos[0].Sandbox != "conv-8" {
		t.Errorf("after the prune: %+v, %v; want conv-8's live token alone", infos, err)
	}
}
