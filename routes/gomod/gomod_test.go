package gomod

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// canaryProxy is the private proxy's token the fake holds: no answer or
// log line may carry it.
const canaryProxy = "gomod-CANARYproxy0123456789abcdefghijklmnop"

const goPolicy = `
[profile.default.go]
modules = ["example.com/*", "github.com/Acme/*"]
min_release_age = "7d"

[[profile.default.go.deny]]
module = "example.com/lib"
versions = "1.2.0"
reason = "compromised release"

[profile.nogo]
models = ["claude-*"]

[[sandbox]]
match = "nogo-*"
profile = "nogo"
`

func newGoProxy(t *testing.T) *fakes.GoProxy {
	t.Helper()
	p, err := fakes.NewGoProxy(fakes.GoProxyOptions{Token: canaryProxy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	old, fresh := time.Now().Add(-30*24*time.Hour), time.Now().Add(-time.Hour)
	for _, m := range []struct {
		path, version string
		at            time.Time
	}{
		{"example.com/lib", "v1.0.0", old},
		{"example.com/lib", "v1.1.0", old},
		{"example.com/lib", "v1.2.0", old},   // denied
		{"example.com/lib", "v1.3.0", fresh}, // too new
		{"example.com/lib", "v1.0.1", time.Time{}},
		{"github.com/Acme/Tool", "v0.1.0", old},
		{"example.org/other", "v1.0.0", old},
	} {
		if err := p.AddModule(m.path, m.version, m.at, map[string]string{"lib.go": "package lib\n"}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func newEnv(t *testing.T, p *fakes.GoProxy) *routetest.Env {
	u, _ := url.Parse(p.URL)
	return routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, Credential: secrets.New(canaryProxy), HeaderTimeout: 10 * time.Second}),
		routetest.WithPolicy(t, goPolicy))
}

func TestServe(t *testing.T) {
	p := newGoProxy(t)
	e := newEnv(t, p)
	auth := routetest.Bearer(e.Token("conv-42"))
	get := func(path string) routetest.Reply { t.Helper(); return e.Do("GET", "/gomod/"+path, auth, "") }

	// The list: the denied, too new and timeless versions are hidden.
	if r := get("example.com/lib/@v/list"); r.Status != 200 || r.Body != "v1.0.0\nv1.1.0\n" {
		t.Errorf("list = %d %q", r.Status, r.Body)
	}
	// @latest: the upstream's (v1.3.0) is too new; the newest visible is
	// answered with its .info.
	if r := get("example.com/lib/@latest"); r.Status != 200 || !strings.Contains(r.Body, `"Version":"v1.1.0"`) {
		t.Errorf("@latest = %d %q", r.Status, r.Body)
	}
	// A visible version passes byte for byte.
	for _, ext := range []string{"info", "mod", "zip"} {
		r := get("example.com/lib/@v/v1.1.0." + ext)
		want := fetch(t, p.URL+"/example.com/lib/@v/v1.1.0."+ext)
		if r.Status != 200 || r.Body != want {
			t.Errorf(".%s = %d, %d bytes; want %d bytes as the upstream sent them", ext, r.Status, len(r.Body), len(want))
		}
	}
	// Capitals, !-escaped and percent-encoded.
	for _, path := range []string{"github.com/!acme/!tool/@v/v0.1.0.zip", "github.com/%21acme/%21tool/@v/v0.1.0.zip"} {
		if r := get(path); r.Status != 200 {
			t.Errorf("%s = %d %q", path, r.Status, r.Body)
		}
	}
	for _, c := range []struct{ path, status, want string }{
		{"example.com/lib/@v/v1.2.0.zip", "403", "cproxy: example.com/lib@v1.2.0 is not allowed for sandbox conv-42: "},
		{"example.com/lib/@v/v1.2.0.zip", "403", "compromised release"},
		{"example.com/lib/@v/v1.3.0.info", "403", "cproxy: example.com/lib@v1.3.0 is 1 hour old; the minimum release age for sandbox conv-42 is 7 days"},
		{"example.com/lib/@v/v1.0.1.mod", "403", "no time"},
		{"example.org/other/@v/list", "403", "cproxy: module example.org/other is not allowed for sandbox conv-42"},
		{"github.com/Acme/Tool/@v/list", "403", "not a module proxy request"},
		{"example.com/lib/@v/master.info", "403", "canonical version"},
		{"example.com/lib/@v/v1.9.9.info", "404", "cproxy: the module proxy 127.0.0.1"}, // no .info, so no time
		{"sumdb/sum.golang.org/lookup/example.org/other@v1.0.0", "403", "module example.org/other is not allowed"},
		{"sumdb/sum.example.com/supported", "403", "proxies the checksum database sum.golang.org only"},
		{"sumdb/sum.golang.org/tile/8/0/../x", "403", "not a checksum database request"},
	} {
		r := get(c.path)
		if strconv.Itoa(r.Status) != c.status || r.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !strings.Contains(r.Body, c.want) {
			t.Errorf("%s = %d %q %q; want %s %q", c.path, r.Status, r.Header.Get("Content-Type"), r.Body, c.status, c.want)
		}
	}
	// The checksum database, through the route.
	if r := get("sumdb/sum.golang.org/supported"); r.Status != 200 {
		t.Errorf("supported = %d %q", r.Status, r.Body)
	}
	if r := get("sumdb/sum.golang.org/lookup/example.com/lib@v1.1.0"); r.Status != 200 || !strings.Contains(r.Body, "example.com/lib v1.1.0 h1:") {
		t.Errorf("lookup = %d %q", r.Status, r.Body)
	}
	if r := get("sumdb/sum.golang.org/latest"); r.Status != 200 || !strings.Contains(r.Body, "sum.golang.org") {
		t.Errorf("latest = %d %q", r.Status, r.Body)
	}
	// Only GET, no query, no body.
	if r := e.Do("POST", "/gomod/example.com/lib/@v/list", auth, ""); r.Status != 403 || !strings.Contains(r.Body, "GET only") {
		t.Errorf("POST = %d %q", r.Status, r.Body)
	}
	if r := get("example.com/lib/@v/list?go-get=1"); r.Status != 403 {
		t.Errorf("query = %d %q", r.Status, r.Body)
	}
	// The sandbox token as Basic auth's password, as go sends GOPROXY's
	// userinfo.
	tok := strings.TrimPrefix(auth["Authorization"], "Bearer ")
	basic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("cproxy:"+tok))}
	if r := e.Do("GET", "/gomod/example.com/lib/@v/v1.0.0.mod", basic, ""); r.Status != 200 {
		t.Errorf("Basic = %d %q", r.Status, r.Body)
	}
	// No token: 401, never forwarded.
	before := len(p.Requests())
	if r := e.Do("GET", "/gomod/example.com/lib/@v/list", nil, ""); r.Status != 401 || len(p.Requests()) != before {
		t.Errorf("no token = %d %q, %d requests upstream", r.Status, r.Body, len(p.Requests())-before)
	}
	// A profile with no go section: nothing, not even the checksum
	// database.
	nogo := routetest.Bearer(e.Token("nogo-1"))
	for _, path := range []string{"example.com/lib/@v/list", "sumdb/sum.golang.org/supported"} {
		if r := e.Do("GET", "/gomod/"+path, nogo, ""); r.Status != 403 {
			t.Errorf("nogo %s = %d %q", path, r.Status, r.Body)
		}
	}
	// Audit lines name the module and version.
	if !strings.Contains(e.Logs.String(), "example.com/lib@v1.2.0") {
		t.Errorf("no audit line names example.com/lib@v1.2.0:\n%s", e.Logs.String())
	}
	// Nothing of what was refused reached the upstream, and all that did
	// carried the real credential.
	for _, r := range p.Requests() {
		if !strings.HasSuffix(r, " auth=real") {
			t.Errorf("a request reached the upstream without the real credential: %s", r)
		}
		if strings.Contains(r, "v1.2.0.") || strings.Contains(r, "example.org") || strings.Contains(r, "sum.example.com") {
			t.Errorf("refused request reached the upstream: %s", r)
		}
	}
}

// TestLatestNoneVisible: an @latest with no visible version is refused
// with the reason, which go prints.
func TestLatestNoneVisible(t *testing.T) {
	p := newGoProxy(t)
	if err := p.AddModule("example.com/fresh", "v1.0.0", time.Now(), map[string]string{"a.go": "package a\n"}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, p)
	r := e.Do("GET", "/gomod/example.com/fresh/@latest", routetest.Bearer(e.Token("conv-1")), "")
	if r.Status != 403 || !strings.Contains(r.Body, "cproxy: no version of example.com/fresh is allowed for sandbox conv-1: its latest version, v1.0.0, is not") {
		t.Errorf("@latest = %d %q", r.Status, r.Body)
	}
	if r := e.Do("GET", "/gomod/example.com/fresh/@v/list", routetest.Bearer(e.Token("conv-1")), ""); r.Status != 200 || r.Body != "" {
		t.Errorf("list = %d %q", r.Status, r.Body)
	}
}

func TestParseSumDB(t *testing.T) {
	for _, p := range []string{
		"sumdb/sum.golang.org/supported", "sumdb/sum.golang.org/latest",
		"sumdb/sum.golang.org/lookup/github.com/!burnt!sushi/toml@v1.6.0",
		"sumdb/sum.golang.org/tile/8/0/x001/234", "sumdb/sum.golang.org/tile/8/1/012.p/5", "sumdb/sum.golang.org/tile/8/data/000",
	} {
		if _, err := parseSumDB(p); err != nil {
			t.Errorf("parseSumDB(%q): %v", p, err)
		}
	}
	for _, p := range []string{
		"sumdb/sum.golang.org/", "sumdb/sum.golang.org/supported/x", "sumdb/sum.golang.org/lookup/github.com/BurntSushi/toml@v1.6.0",
		"sumdb/sum.golang.org/lookup/example.com/x@v1.2", "sumdb/sum.golang.org/lookup/example.com/x", "sumdb/sum.golang.org/tile/8/0/1234",
		"sumdb/sum.golang.org/tile/8/0/../001", "sumdb/sum.golang.org/tile/8/0/001.p/0", "sumdb/other.example/supported",
		"sumdb/sum.golang.org.evil/supported", "sumdb/sum.golang.org/../x",
	} {
		if _, err := parseSumDB(p); err == nil {
			t.Errorf("parseSumDB(%q) accepted", p)
		}
	}
}

// fetch is the upstream's answer to url, with the fake's token.
func fetch(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+canaryProxy)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestInfoTimeOnce: under a min_release_age, a .info whose time cproxy
// does not hold yet costs one request upstream, not a fetch of the time
// and then the forward, and is decided as before: a visible version byte
// for byte, a version too new, with no time or unknown refused in the
// same words, nothing of a refused answer passed on.
func TestInfoTimeOnce(t *testing.T) {
	p := newGoProxy(t)
	e := newEnv(t, p)
	auth := routetest.Bearer(e.Token("conv-42"))
	infos := func() int {
		n := 0
		for _, r := range p.Requests() {
			if strings.Contains(r, ".info ") {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		version string
		status  int
		want    string
	}{
		{"v1.1.0", 200, fetch(t, p.URL+"/example.com/lib/@v/v1.1.0.info")},
		{"v1.3.0", 403, "cproxy: example.com/lib@v1.3.0 is 1 hour old; the minimum release age for sandbox conv-42 is 7 days"},
		{"v1.0.1", 403, "no time"},
		{"v1.9.9", 404, "cproxy: the module proxy 127.0.0.1"},
	} {
		before := infos()
		r := e.Do("GET", "/gomod/example.com/lib/@v/"+c.version+".info", auth, "")
		if r.Status != c.status || !strings.Contains(r.Body, c.want) || (c.status == 200) != (r.Body == c.want) {
			t.Errorf("%s.info = %d %q; want %d %q", c.version, r.Status, r.Body, c.status, c.want)
		}
		if n := infos() - before; n != 1 {
			t.Errorf("%s.info: %d .info requests upstream, want 1", c.version, n)
		}
		if c.status != 200 && strings.Contains(r.Body, `"Version"`) {
			t.Errorf("%s.info: a refusal passed on the upstream's answer: %q", c.version, r.Body)
		}
	}
	// The time read from the answer is held: the .mod and .zip are
	// decided on it without asking again.
	before := infos()
	for _, f := range []string{"mod", "zip"} {
		if r := e.Do("GET", "/gomod/example.com/lib/@v/v1.1.0."+f, auth, ""); r.Status != 200 {
			t.Errorf(".%s = %d %q", f, r.Status, r.Body)
		}
	}
	if n := infos() - before; n != 0 {
		t.Errorf(".mod and .zip after the .info: %d .info requests upstream, want 0", n)
	}
}

// TestTimeCachePerProfile: the .info times cproxy keeps are the
// upstream's facts, never a decision. A time fetched for one profile
// decides each other profile by its own min_release_age, and a reload
// that raises a profile's minimum hides what was visible before.
func TestTimeCachePerProfile(t *testing.T) {
	p, err := fakes.NewGoProxy(fakes.GoProxyOptions{Token: canaryProxy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.AddModule("example.com/lib", "v1.0.0", time.Now().Add(-10*24*time.Hour), map[string]string{"lib.go": "package lib\n"}); err != nil {
		t.Fatal(err)
	}
	const two = `
[profile.default.go]
modules = ["example.com/*"]
min_release_age = "1d"

[profile.strict.go]
modules = ["example.com/*"]
min_release_age = "30d"

[[sandbox]]
match = "strict-*"
profile = "strict"
`
	u, _ := url.Parse(p.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, Credential: secrets.New(canaryProxy), HeaderTimeout: 10 * time.Second}),
		routetest.WithPolicy(t, two))
	lax, strict := routetest.Bearer(e.Token("conv-1")), routetest.Bearer(e.Token("strict-1"))
	for _, f := range []string{"info", "mod", "zip"} {
		path := "/gomod/example.com/lib/@v/v1.0.0." + f
		if r := e.Do("GET", path, lax, ""); r.Status != 200 {
			t.Errorf("default %s = %d %q", f, r.Status, r.Body)
		}
		if r := e.Do("GET", path, strict, ""); r.Status != 403 || !strings.Contains(r.Body, "strict-1") {
			t.Errorf("strict %s after default's = %d %q; want 403", f, r.Status, r.Body)
		}
	}
	if r := e.Do("GET", "/gomod/example.com/lib/@v/list", strict, ""); r.Status != 200 || r.Body != "" {
		t.Errorf("strict list = %d %q; want it empty", r.Status, r.Body)
	}
	e.Server.SetPolicy(routetest.MustPolicy(t, strings.Replace(two, `min_release_age = "1d"`, `min_release_age = "14d"`, 1)))
	for _, f := range []string{"info", "mod", "zip", "list"} {
		path := "/gomod/example.com/lib/@v/v1.0.0." + f
		if f == "list" {
			path = "/gomod/example.com/lib/@v/list"
		}
		r := e.Do("GET", path, lax, "")
		if f == "list" && (r.Status != 200 || r.Body != "") || f != "list" && r.Status != 403 {
			t.Errorf("default %s after the reload = %d %q; want it hidden", f, r.Status, r.Body)
		}
	}
}

// TestForwardedHeaders: the upstream is asked for an answer cproxy can
// read whole, uncompressed and unconditional, whatever the client sent.
func TestForwardedHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		io.WriteString(w, "module example.com/lib\n")
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, HeaderTimeout: 10 * time.Second}),
		routetest.WithPolicy(t, "[profile.default.go]\nmodules = [\"example.com/*\"]\n"))
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Accept-Encoding", "gzip", "If-None-Match", `"abc"`,
		"If-Modified-Since", "Mon, 07 Dec 2026 00:00:00 GMT", "Range", "bytes=0-10", "If-Range", `"abc"`)
	if r := e.Do("GET", "/gomod/example.com/lib/@v/v1.0.0.mod", h, ""); r.Status != 200 || r.Body != "module example.com/lib\n" {
		t.Fatalf(".mod = %d %q", r.Status, r.Body)
	}
	sent := <-got
	if ae := sent.Values("Accept-Encoding"); len(ae) != 1 || ae[0] != "identity" {
		t.Errorf("Accept-Encoding upstream = %q, want identity", ae)
	}
	for _, k := range conditionalHeaders {
		if v, ok := sent[k]; ok {
			t.Errorf("%s reached the upstream: %q", k, v)
		}
	}
}
