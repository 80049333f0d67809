package relay_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/routes/relay"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

const (
	canaryHub = "hub_CANARYhub0123456789abcdefghij"
	canaryMod = "mod_CANARYmod0123456789abcdefghij"
)

// newRelayEnv serves relay.mod in front of an echo server: a hub credential
// from the environment and a per-token mod token, both canaries no log line
// or response may hold. Each of change changes the relay first.
func newRelayEnv(t *testing.T, change ...func(*relay.Relay)) (*routetest.Env, *fakes.Echo) {
	t.Helper()
	echo := fakes.NewEcho()
	t.Cleanup(echo.Close)
	t.Setenv("RELAY_HUB_TOKEN", canaryHub)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(`
[profile.default]
models = ["claude-*"]
relays = ["mod"]

[profile.other]
models = ["claude-*"]

[[sandbox]]
match = "other-*"
profile = "other"
`), 0o600)
	os.WriteFile(filepath.Join(dir, "cproxy.toml"), []byte(`policy = "policy.toml"

[relay.mod]
prefix = "/mod/"
url = "`+echo.URL+`/hub/"
methods = ["GET", "POST"]
paths = ["events", "sessions/*/commands", "stream", "files/**"]

[relay.mod.headers]
Authorization = { credential = "env:RELAY_HUB_TOKEN", prefix = "Bearer " }
X-Mod-Token = { value = "mod_token" }
`), 0o600)
	cfg, err := config.LoadConfig(filepath.Join(dir, "cproxy.toml"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Relays["mod"]
	u, _ := url.Parse(r.URL)
	live, err := (&secrets.Loader{}).Live("relay.mod", secrets.Source(r.Headers["Authorization"].Credential), nil)
	if err != nil {
		t.Fatal(err)
	}
	rl := relay.Relay{Rules: &r.Relay, Prefix: r.Prefix, Query: r.Query, HeaderTimeout: r.HeaderTimeout.Duration, URL: u, Headers: []relay.Header{
		{Name: "Authorization", Prefix: "Bearer ", Live: live},
		{Name: "X-Mod-Token", Value: "mod_token"},
	}}
	for _, c := range change {
		c(&rl)
	}
	e := routetest.New(t, func(o *routetest.Options) {
		o.Policy = cfg.Rules
		o.Relays = []relay.Relay{rl}
		o.Canaries = append(o.Canaries, canaryHub, canaryMod)
	})
	return e, echo
}

// mintWithValues mints a token for sandbox with the per-token values
// body gives, through the admin API.
func mintWithValues(t *testing.T, e *routetest.Env, sandbox, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(e.Admin.URL+"/tokens?sandbox="+sandbox, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// modToken mints a token for sandbox with the mod token.
func modToken(t *testing.T, e *routetest.Env, sandbox string) string {
	t.Helper()
	status, body := mintWithValues(t, e, sandbox, `{"values": {"mod_token": "`+canaryMod+`"}}`)
	var created admin.TokenCreated
	json.Unmarshal([]byte(body), &created)
	if status != http.StatusCreated || !slices.Equal(created.Values, []string{"mod_token"}) || strings.Contains(body, canaryMod) {
		t.Fatalf("mint = %d %s", status, body)
	}
	return created.Value
}

func TestRelayForwards(t *testing.T) {
	e, echo := newRelayEnv(t)
	tok := modToken(t, e, "conv-1")
	auth := map[string]string{"Authorization": "Bearer " + tok, "X-Mod-Token": "from-the-sandbox", "Cookie": "c=1", "Content-Type": "application/json"}
	r := e.Do("POST", "/mod/sessions/42/commands", auth, `{"cmd":"go"}`)
	if r.Status != 200 {
		t.Fatalf("relay = %d %s", r.Status, r.Body)
	}
	got := echo.Requests()[0]
	if got.Method != "POST" || got.Path != "/hub/sessions/42/commands" || got.Body != `{"cmd":"go"}` {
		t.Errorf("upstream got %s %s %q", got.Method, got.Path, got.Body)
	}
	if got.Header.Get("Authorization") != "Bearer "+canaryHub || got.Header.Get("X-Mod-Token") != canaryMod || got.Header.Get("Cookie") != "" {
		t.Errorf("upstream headers: %v", got.Header)
	}
	if strings.Contains(r.Body, tok) {
		t.Error("the upstream saw the sandbox token")
	}
	for _, h := range got.Header {
		for _, v := range h {
			if strings.Contains(v, "cpx_") {
				t.Errorf("a header upstream holds a sandbox token: %q", v)
			}
		}
	}

	// Streaming: each event arrives as it is sent.
	req, _ := http.NewRequest("GET", e.Proxy.URL+"/mod/stream", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("stream Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if strings.Join(events, " ") != `{"n":1} {"n":2} {"n":3}` {
		t.Errorf("events %v", events)
	}
}

func TestRelayRefusals(t *testing.T) {
	e, echo := newRelayEnv(t)
	auth := routetest.Bearer(modToken(t, e, "conv-1"))
	bare := routetest.Bearer(e.Token("conv-2")) // minted without the mod token
	other := routetest.Bearer(e.Token("other-1"))
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
		status       int
		msg          string
	}{
		{"GET", "/mod/events", nil, 401, "no sandbox token"},
		{"GET", "/mod/events", other, 403, "relay mod is not allowed for sandbox other-1"},
		{"GET", "/mod/events", bare, 403, "relay mod needs the per-token value mod_token, which this sandbox's token was minted without"},
		{"DELETE", "/mod/events", auth, 403, "relay mod does not forward DELETE (it forwards GET, POST)"},
		{"GET", "/mod/admin", auth, 403, "relay mod does not forward admin"},
		{"GET", "/mod/sessions/42/43/commands", auth, 403, "relay mod does not forward sessions/42/43/commands"},
		{"GET", "/mod/sessions/..%2f..%2fadmin/commands", auth, 403, "is not a path cproxy forwards"},
		{"GET", "/mod/sessions/%2e%2e/commands", auth, 403, "is not a path cproxy forwards"},
		{"GET", "/mod/files/a%5c..%5cb", auth, 403, "is not a path cproxy forwards"},
		{"GET", "/mod/events?since=1", auth, 403, "relay mod forwards no query string"},
		{"GET", "/mod/", auth, 403, "no path under /mod/"},
	} {
		r := e.Do(c.method, c.path, c.hdr, "")
		var got struct{ Error string }
		json.Unmarshal([]byte(r.Body), &got)
		if r.Status != c.status || !strings.Contains(got.Error, c.msg) {
			t.Errorf("%s %s = %d %s, want %d %q", c.method, c.path, r.Status, r.Body, c.status, c.msg)
		}
	}
	if n := len(echo.Requests()); n != 0 {
		t.Errorf("refused requests reached the upstream: %d", n)
	}
	if !strings.Contains(e.Logs.String(), `"route":"relay.mod"`) {
		t.Errorf("no audit line names the relay:\n%s", e.Logs.String())
	}
}

// POST /tokens takes the per-token values the relays' headers name, and
// no other.
func TestRelayValueNames(t *testing.T) {
	e, _ := newRelayEnv(t)
	modToken(t, e, "conv-1")
	status, body := mintWithValues(t, e, "conv-2", `{"values": {"hub_token": "x"}}`)
	if status != http.StatusBadRequest || !strings.Contains(body, `(the config's relays use: mod_token)`) {
		t.Errorf("an unknown value = %d %s", status, body)
	}
}

// GET /readyz names a header's credential source that cannot be read by
// its relay and header.
func TestRelayReadyzNamesTheHeader(t *testing.T) {
	key := filepath.Join(t.TempDir(), "mod-key")
	if err := os.WriteFile(key, []byte(canaryMod), 0o600); err != nil {
		t.Fatal(err)
	}
	mod, err := new(secrets.Loader).Live("relay.mod", secrets.Source("file:"+key), nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(key)
	u, _ := url.Parse("http://127.0.0.1:1/")
	e := routetest.New(t, func(o *routetest.Options) {
		o.Relays = []relay.Relay{{Rules: &policy.Relay{Name: "mod"}, Prefix: "/mod/", URL: u, Headers: []relay.Header{{Name: "X-Mod-Token", Live: mod}}}}
		o.Canaries = append(o.Canaries, canaryMod)
	})
	r := e.DoAt(e.Admin.URL, "GET", "/readyz", nil, "")
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Body, "the credential source of relay.mod (header X-Mod-Token) (file) cannot be read") {
		t.Fatalf("GET /readyz = %d %s", r.Status, r.Body)
	}
}

// TestRelayMethodParam: a _method query parameter, which Laravel, Symfony,
// Spring and Express's method-override read as the request's method, may
// only repeat the request's own; in any case, percent-encoded, as PHP reads
// names, or given twice. Nothing refused reaches the upstream.
func TestRelayMethodParam(t *testing.T) {
	e, echo := newRelayEnv(t, func(rl *relay.Relay) { rl.Query = true })
	auth := routetest.Bearer(modToken(t, e, "conv-1"))
	const refused = `relay mod does not forward a _method query parameter naming "DELETE" (it forwards GET, POST; a _method may only repeat the request's own method, POST)`
	for _, c := range []struct {
		method, query, msg string
	}{
		{"POST", "_method=DELETE", refused},
		{"POST", "%5Fmethod=DELETE", refused},
		{"POST", "%5fMETHOD=DELETE", refused},
		{"POST", "_Method=DELETE", refused},
		{"POST", "_method=POST&_method=DELETE", refused},
		{"POST", "_method[]=DELETE", refused},
		{"POST", "_method%5B0%5D=DELETE", refused},
		{"POST", "+_method=DELETE", refused},
		{"POST", ".method=DELETE", refused},
		{"POST", "%20%20_method=DELETE", refused},
		{"POST", "_method%00x=DELETE", refused},
		{"POST", "since=1&_method=DELETE", refused},
		{"POST", "_method=PATCH", `naming "PATCH" (it forwards GET, POST;`},
		{"POST", "_method=", `naming "" (it forwards GET, POST;`},
		{"POST", "_method=POST%20", `naming "POST " (it forwards GET, POST;`},
		// One the relay forwards, but not the request's own.
		{"POST", "_method=GET", `naming "GET" (it forwards GET, POST; a _method may only repeat the request's own method, POST)`},
		{"GET", "_method=POST", `naming "POST" (it forwards GET, POST; a _method may only repeat the request's own method, GET)`},
	} {
		r := e.Do(c.method, "/mod/events?"+c.query, auth, "")
		var got struct{ Error string }
		json.Unmarshal([]byte(r.Body), &got)
		if r.Status != 403 || !strings.HasPrefix(got.Error, "cproxy: ") || !strings.Contains(got.Error, c.msg) {
			t.Errorf("%s ?%s = %d %s, want 403 %q", c.method, c.query, r.Status, r.Body, c.msg)
		}
	}
	if n := len(echo.Requests()); n != 0 {
		t.Fatalf("refused requests reached the upstream: %+v", echo.Requests())
	}
	// The request's own method, in any case, and names that are not _method.
	for _, query := range []string{"_method=POST", "_method=post", "method=DELETE", "x_method=DELETE", "_methods=DELETE", "q=_method%3DDELETE"} {
		if r := e.Do("POST", "/mod/events?"+query, auth, ""); r.Status != 200 {
			t.Errorf("POST ?%s = %d %s", query, r.Status, r.Body)
		}
	}
	var got []string
	for _, r := range echo.Requests() {
		got = append(got, r.Method+" "+r.Query)
	}
	want := []string{"POST _method=POST", "POST _method=post", "POST method=DELETE", "POST x_method=DELETE", "POST _methods=DELETE", "POST q=_method%3DDELETE"}
	if !slices.Equal(got, want) {
		t.Errorf("upstream got %q, want %q", got, want)
	}
}
