package routes

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/secrets"
)

const (
	canaryHub = "hub_CANARYhub0123456789abcdefghij"
	canaryMod = "mod_CANARYmod0123456789abcdefghij"
)

// newRelayEnv serves relay.mod in front of an echo server: a hub credential
// from the environment and a per-token mod token.
func newRelayEnv(t *testing.T) (*env, *fakes.Echo) {
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
	rl := Relay{Rules: &r.Relay, Prefix: r.Prefix, Query: r.Query, HeaderTimeout: r.HeaderTimeout.Duration, URL: u, Headers: []RelayHeader{
		{Name: "Authorization", Prefix: "Bearer ", Live: live},
		{Name: "X-Mod-Token", Value: "mod_token"},
	}}
	e := newEnv(t, func(o *testOptions) {
		o.Policy = cfg.Rules
		o.Relays = []Relay{rl}
	})
	t.Cleanup(func() {
		for _, c := range []string{canaryHub, canaryMod} {
			if strings.Contains(e.logs.String(), c) {
				t.Errorf("a log line holds a relay credential")
			}
		}
	})
	return e, echo
}

// mintWithValues mints a token with per-token values through the admin API.
func (e *env) mintWithValues(sandbox, body string) (int, string) {
	e.t.Helper()
	resp, err := http.Post(e.admin.URL+"/tokens?sandbox="+sandbox, "application/json", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRelayForwards(t *testing.T) {
	e, echo := newRelayEnv(t)
	status, body := e.mintWithValues("conv-1", `{"values": {"mod_token": "`+canaryMod+`"}}`)
	var created TokenCreated
	json.Unmarshal([]byte(body), &created)
	if status != 201 || strings.Join(created.Values, ",") != "mod_token" || strings.Contains(body, canaryMod) {
		t.Fatalf("mint = %d %s", status, body)
	}
	tok := created.Value
	auth := map[string]string{"Authorization": "Bearer " + tok, "X-Mod-Token": "from-the-sandbox", "Cookie": "c=1", "Content-Type": "application/json"}
	r := e.do("POST", "/mod/sessions/42/commands", auth, `{"cmd":"go"}`)
	if r.status != 200 {
		t.Fatalf("relay = %d %s", r.status, r.body)
	}
	got := echo.Requests()[0]
	if got.Method != "POST" || got.Path != "/hub/sessions/42/commands" || got.Body != `{"cmd":"go"}` {
		t.Errorf("upstream got %s %s %q", got.Method, got.Path, got.Body)
	}
	if got.Header.Get("Authorization") != "Bearer "+canaryHub || got.Header.Get("X-Mod-Token") != canaryMod || got.Header.Get("Cookie") != "" {
		t.Errorf("upstream headers: %v", got.Header)
	}
	if strings.Contains(r.body, tok) {
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
	req, _ := http.NewRequest("GET", e.proxy.URL+"/mod/stream", nil)
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
	_, body := e.mintWithValues("conv-1", `{"values": {"mod_token": "`+canaryMod+`"}}`)
	var created TokenCreated
	json.Unmarshal([]byte(body), &created)
	auth := bearer(created.Value)
	bare := bearer(e.token("conv-2")) // minted without the mod token
	other := bearer(e.token("other-1"))
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
		r := e.do(c.method, c.path, c.hdr, "")
		var got jsonError
		json.Unmarshal([]byte(r.body), &got)
		if r.status != c.status || !strings.Contains(got.Error, c.msg) {
			t.Errorf("%s %s = %d %s, want %d %q", c.method, c.path, r.status, r.body, c.status, c.msg)
		}
	}
	if n := len(echo.Requests()); n != 0 {
		t.Errorf("refused requests reached the upstream: %d", n)
	}
	if !strings.Contains(e.logs.String(), `"route":"relay.mod"`) {
		t.Errorf("no audit line names the relay:\n%s", e.logs.String())
	}
}

func TestTokenValuesRefused(t *testing.T) {
	e, _ := newRelayEnv(t)
	for _, c := range []struct {
		ct, body string
		status   int
		msg      string
	}{
		{"application/json", `{"values": {"hub_token": "x"}}`, 400, `no relay uses a value named \"hub_token\" (the config's relays use: mod_token)`},
		{"application/json", `{"values": {"mod_token": "a\r\nX-Evil: 1"}}`, 400, "holds a control character"},
		{"application/json", `{"values": {"mod_token": ""}}`, 400, "must be 1 to 4096 bytes"},
		{"application/json", `{"values": {"mod_token": 7}}`, 400, `the body is not {\"values\"`},
		{"application/json", `{"values": {}, "extra": 1}`, 400, "no other keys"},
		{"text/plain", `{"values": {"mod_token": "x"}}`, 415, "must be JSON"},
	} {
		resp, err := http.Post(e.admin.URL+"/tokens?sandbox=conv-1", c.ct, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s = %d %s, want %d %q", c.body, resp.StatusCode, b, c.status, c.msg)
		}
	}
	// Nothing was minted by a refused request, and the list never shows a value.
	resp, _ := http.Get(e.admin.URL + "/tokens")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "conv-1") {
		t.Errorf("a refused mint left a token: %s", b)
	}
	e.mintWithValues("conv-9", `{"values": {"mod_token": "`+canaryMod+`"}}`)
	resp, _ = http.Get(e.admin.URL + "/tokens")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), canaryMod) || !strings.Contains(string(b), "conv-9") {
		t.Errorf("GET /tokens: %s", b)
	}
}
