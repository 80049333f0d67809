package npm

import (
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/secrets"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
)

const canaryNPM = "npm_CANARYnpm0123456789abcdefghijklmnopqrs"

const npmPolicy = `
[profile.default]
models = ["claude-*"]
packages = ["is-*", "@acme/*"]
`

func newNPMEnv(t *testing.T, reg *fakes.NPMRegistry, public string) *routetest.Env {
	u, _ := url.Parse(reg.URL)
	return routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, Credential: secrets.New(canaryNPM), HeaderTimeout: 10 * time.Second}), routetest.WithPolicy(t, npmPolicy), func(o *routetest.Options) {
		o.PublicURL = public
	})
}

func newNPMRegistry(t *testing.T, gz bool) *fakes.NPMRegistry {
	reg := fakes.NewNPMRegistry(fakes.NPMRegistryOptions{Token: canaryNPM, Gzip: gz})
	t.Cleanup(reg.Close)
	for name, vs := range map[string][]string{"is-thing": {"1.0.0", "1.1.0"}, "@acme/util": {"2.0.0"}, "left-pad": {"1.3.0"}} {
		if err := reg.AddPackage(name, vs...); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

func TestParseNPMPath(t *testing.T) {
	ok := []struct {
		method, path string
		want         npmRequest
		upstream     string
	}{
		{"GET", "/npm/react", npmRequest{kind: npmPackument, name: "react"}, "/react"},
		{"GET", "/npm/@types%2fnode", npmRequest{kind: npmPackument, name: "@types/node"}, "/@types%2fnode"},
		{"GET", "/npm/@types%2Fnode", npmRequest{kind: npmPackument, name: "@types/node"}, "/@types%2fnode"},
		{"GET", "/npm/@types/node", npmRequest{kind: npmPackument, name: "@types/node"}, "/@types%2fnode"},
		{"GET", "/npm/%72eact", npmRequest{kind: npmPackument, name: "react"}, "/react"},
		{"GET", "/npm/lodash.merge", npmRequest{kind: npmPackument, name: "lodash.merge"}, "/lodash.merge"},
		{"GET", "/npm/react/-/react-18.2.0.tgz", npmRequest{kind: npmTarball, name: "react", file: "react-18.2.0.tgz"}, "/react/-/react-18.2.0.tgz"},
		{"GET", "/npm/@types/node/-/node-20.1.0-beta.1.tgz", npmRequest{kind: npmTarball, name: "@types/node", file: "node-20.1.0-beta.1.tgz"}, "/@types/node/-/node-20.1.0-beta.1.tgz"},
		{"GET", "/npm/@types%2fnode/-/node-20.1.0.tgz", npmRequest{kind: npmTarball, name: "@types/node", file: "node-20.1.0.tgz"}, "/@types/node/-/node-20.1.0.tgz"},
		{"GET", "/npm/-/ping", npmRequest{kind: npmPing}, "/-/ping"},
		{"POST", "/npm/-/npm/v1/security/advisories/bulk", npmRequest{kind: npmAudit}, "/-/npm/v1/security/advisories/bulk"},
	}
	for _, c := range ok {
		got, err := parseNPMPath(c.method, c.path, "")
		if err != nil || got != c.want {
			t.Errorf("%s %s = %+v, %v; want %+v", c.method, c.path, got, err, c.want)
			continue
		}
		tg := got.target()
		up := tg.Path
		if tg.RawPath != "" {
			up = tg.RawPath
		}
		if up != c.upstream {
			t.Errorf("%s: upstream path %q, want %q", c.path, up, c.upstream)
		}
	}
	bad := []struct{ method, path, msg string }{
		{"PUT", "/npm/react", "publishing react is not allowed"},
		{"PUT", "/npm/@acme%2futil", "publishing @acme/util is not allowed"},
		{"DELETE", "/npm/react/-rev/3-abc", "unpublishing react"},
		{"DELETE", "/npm/react/-/react-1.0.0.tgz", "unpublishing react"},
		{"POST", "/npm/react", "only GET"},
		{"GET", "/npm/-/package/react/dist-tags", "dist-tag"},
		{"PUT", "/npm/-/package/react/dist-tags/latest", "dist-tag"},
		{"GET", "/npm/-/npm/v1/tokens", "token endpoints"},
		{"PUT", "/npm/-/user/org.couchdb.user:bob", "user endpoints"},
		{"GET", "/npm/-/whoami", "user endpoints"},
		{"GET", "/npm/-/v1/search", "a search needs text"},
		{"POST", "/npm/-/v1/search", "not an npm request"},
		{"GET", "/npm/-/npm/v1/security/advisories/bulk", "cproxy takes npm audit only as npm 7 and later send it"},
		{"POST", "/npm/-/npm/v1/security/audits/quick", "cproxy takes npm audit only as npm 7 and later send it"},
		{"POST", "/npm/-/ping", "not an npm request"},
		{"GET", "/npm/@Types/node", "not an npm package name"},
		{"GET", "/npm/..", "not an npm package name"},
		{"GET", "/npm/%2e%2e", "not an npm package name"},
		{"GET", "/npm/%2e%2e%2fetc", "not an npm package name"},
		{"GET", "/npm/.hidden", "not an npm package name"},
		{"GET", "/npm/_private", "not an npm package name"},
		{"GET", "/npm/a%252fb", "not an npm package name"},
		{"GET", "/npm/a%2fb", "not an npm package name"},
		{"GET", "/npm/@scope", "not an npm package name"},
		{"GET", "/npm/@scope/", "not an npm package name"},
		{"GET", "/npm/@scope%2f..", "not an npm package name"},
		{"GET", "/npm/@scope/a%2fb", "not an npm package name"},
		{"GET", "/npm/@a%2fb/c", "not an npm request"},
		{"GET", "/npm/@a%2fb%2fc", "not an npm package name"},
		{"GET", "/npm/%40types%2fnode%00", "not an npm package name"},
		{"GET", "/npm/" + strings.Repeat("a", 215), "not an npm package name"},
		{"GET", "/npm/node_modules", "not an npm package name"},
		{"GET", "/npm/react/", "not an npm request"},
		{"GET", "/npm/react/-/", "not a tarball of react"},
		{"GET", "/npm/react/-/lodash-1.0.0.tgz", "not a tarball of react"},
		{"GET", "/npm/react/-/react-1.0.0.tgz.sig", "not a tarball of react"},
		{"GET", "/npm/react/-/react-..%2f..%2fx.tgz", "not a tarball of react"},
		{"GET", "/npm/react/-/react-1.0.0%2f..%2f..%2fx.tgz", "not a tarball of react"},
		{"GET", "/npm/react/-/../x", "not an npm request"},
		{"GET", "/npm/@types/node/-/@types-node-1.0.0.tgz", "not a tarball of @types/node"},
		{"GET", "/npm/react/1.0.0", "not an npm request"},
		{"GET", "/npm/react/latest", "not an npm request"},
		{"GET", "/npm/%zz", "malformed percent-encoding"},
		{"GET", "/npm/", "not an npm package name"},
		{"GET", "/npm/-/anything", "not an npm request"},
	}
	for _, c := range bad {
		got, err := parseNPMPath(c.method, c.path, "")
		if err == nil {
			t.Errorf("%s %s accepted: %+v", c.method, c.path, got)
			continue
		}
		if !strings.Contains(err.Error(), c.msg) || !strings.HasPrefix(err.Error(), "cproxy: ") {
			t.Errorf("%s %s: %q, want it to say %q", c.method, c.path, err, c.msg)
		}
	}
}

func TestNPMSearchQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"text=left&size=20": "size=20&text=left",
		"text=a+b&from=0&quality=0.65&popularity=0.98&maintenance=0.5": "from=0&maintenance=0.5&popularity=0.98&quality=0.65&text=a+b",
		"text=%40types%2Fnode": "text=%40types%2Fnode",
	} {
		if got, err := searchQuery(raw); err != nil || got != want {
			t.Errorf("searchQuery(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for raw, msg := range map[string]string{
		"":                                 "a search needs text",
		"text=+":                           "a search needs text",
		"text=a&text=b":                    "must be given once",
		"text=a&size=-1":                   "size must be given once, as a number",
		"text=a&size=1e3":                  "as a number",
		"text=a&quality=1.":                "as a number",
		"text=a&size=1000":                 "as a number",
		"text=a&access_token=x":            `search parameter "access_token" is not one npm sends`,
		"text=%zz":                         "malformed",
		"text=" + strings.Repeat("a", 513): "text of at most 512 bytes",
	} {
		if _, err := searchQuery(raw); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("searchQuery(%q) = %v, want an error saying %q", raw, err, msg)
		}
	}
}

func TestNPMValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"react": true, "@types/node": true, "a": true, "a-b.c_d~e": true, "123": true, "-": true,
		"JSONStream": true, "@types/JSONStream": true, "@Types/node": false,
		"": false, "@types": false, "@/a": false, "@a/": false, "a/b": false, "@a/b/c": false,
		".a": false, "_a": false, "@.a/b": false, "a b": false, "a%20b": false, "a:b": false, "é": false,
		strings.Repeat("a", 214): true, strings.Repeat("a", 215): false,
	} {
		if got := validNPMName(name); got != want {
			t.Errorf("validNPMName(%q) = %v, want %v", name, got, want)
		}
	}
}

// npmRefused checks that e refuses method path, sent with hdr, with
// wantStatus and a message holding want, in the registry's error shape.
func npmRefused(t *testing.T, e *routetest.Env, method, path string, hdr map[string]string, wantStatus int, want string) {
	t.Helper()
	r := e.Do(method, path, hdr, "")
	var body struct{ Error, Code string }
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Errorf("%s %s: not npm's error shape: %q", method, path, r.Body)
		return
	}
	if r.Status != wantStatus || !strings.Contains(body.Error, want) || !strings.HasPrefix(body.Error, "cproxy: ") {
		t.Errorf("%s %s = %d %q, want %d %q", method, path, r.Status, body.Error, wantStatus, want)
	}
	if !slices.Contains(routes.Codes, body.Code) {
		t.Errorf("%s %s: code %q is not one of routes.Codes", method, path, body.Code)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
}

func TestNPMRefusals(t *testing.T) {
	reg := newNPMRegistry(t, false)
	e := newNPMEnv(t, reg, "http://proxy.example:8080")
	tok := e.Token("conv-42")
	auth := routetest.Bearer(tok)
	npmRefused(t, e, "GET", "/npm/left-pad", auth, 403, "cproxy: package left-pad is not allowed for sandbox conv-42")
	npmRefused(t, e, "GET", "/npm/left-pad/-/left-pad-1.3.0.tgz", auth, 403, "package left-pad is not allowed for sandbox conv-42")
	npmRefused(t, e, "GET", "/npm/@other%2fpkg", auth, 403, "package @other/pkg is not allowed")
	npmRefused(t, e, "PUT", "/npm/is-thing", auth, 403, "publishing is-thing is not allowed")
	npmRefused(t, e, "DELETE", "/npm/is-thing/-rev/1-a", auth, 403, "unpublishing is-thing")
	npmRefused(t, e, "PUT", "/npm/-/package/is-thing/dist-tags/latest", auth, 403, "dist-tag")
	npmRefused(t, e, "GET", "/npm/-/whoami", auth, 403, "user endpoints")
	npmRefused(t, e, "GET", "/npm/-/npm/v1/tokens", auth, 403, "token endpoints")
	npmRefused(t, e, "GET", "/npm/-/v1/search?text=x", auth, 403, "npm search is not allowed for sandbox conv-42 (the policy's npm.search is off)")
	npmRefused(t, e, "POST", "/npm/-/npm/v1/security/advisories/bulk", auth, 403, "npm audit is not allowed for sandbox conv-42 (the policy's npm.audit is off); run npm with --no-audit")
	npmRefused(t, e, "GET", "/npm/is-thing?write=true", auth, 403, "a query string on /npm/is-thing is not something npm sends")
	npmRefused(t, e, "GET", "/npm/-/ping?x=1", auth, 403, "a query string on /npm/-/ping")
	npmRefused(t, e, "GET", "/npm/..%2f..%2fetc%2fpasswd", auth, 403, "not an npm package name")
	npmRefused(t, e, "GET", "/npm/is-thing/-/is-other-1.0.0.tgz", auth, 403, "not a tarball of is-thing")
	// Authentication comes first: nothing is decided without a token.
	npmRefused(t, e, "GET", "/npm/is-thing", nil, 401, "no sandbox token")
	npmRefused(t, e, "PUT", "/npm/is-thing", nil, 401, "no sandbox token")
	npmRefused(t, e, "GET", "/npm/is-thing", routetest.Bearer("cpx_nonsense"), 401, "malformed sandbox token")
	if r := reg.Requests(); len(r) != 0 {
		t.Errorf("the registry received %d requests, want none: %+v", len(r), r[0])
	}
}

func TestNPMForwards(t *testing.T) {
	for _, gz := range []bool{false, true} {
		reg := newNPMRegistry(t, gz)
		if err := reg.AddPackage("is-other", "1.0.0", "1.1.0", "1.2.0"); err != nil {
			t.Fatal(err)
		}
		reg.SetTarballURL("is-other", "1.2.0", "https://evil.example/is-other/-/is-other-1.2.0.tgz")
		reg.SetTarballURL("is-other", "1.1.0", reg.URL+"/is-thing/-/is-thing-1.1.0.tgz")
		e := newNPMEnv(t, reg, "http://proxy.example:8080/")
		tok := e.Token("conv-42")
		hdr := routetest.With(routetest.Bearer(tok), "Accept-Encoding", "gzip, deflate, br")

		// A packument: tarballs point at cproxy, integrity as the registry
		// sent it, the real token upstream, identity to the client.
		for _, path := range []string{"/npm/@acme%2futil", "/npm/@acme/util"} {
			r := e.Do("GET", path, hdr, "")
			if r.Status != 200 || r.Header.Get("Content-Encoding") != "" || r.Header.Get("Content-Length") != fmt.Sprint(len(r.Body)) {
				t.Fatalf("gzip=%v %s: %d %v %q", gz, path, r.Status, r.Header, r.Body)
			}
			if !strings.Contains(r.Body, `"tarball":"http://proxy.example:8080/npm/@acme/util/-/util-2.0.0.tgz"`) {
				t.Errorf("gzip=%v: tarball not rewritten: %s", gz, r.Body)
			}
			tgz, _ := fakes.NPMTarball("@acme/util", "2.0.0")
			if !strings.Contains(r.Body, integrityOf(tgz)) {
				t.Errorf("integrity changed: %s", r.Body)
			}
			if et := r.Header.Get("Etag"); !strings.HasPrefix(et, `W/"`) {
				t.Errorf("ETag %q, want a weak one", et)
			}
		}
		// Abbreviated metadata passes Accept.
		r := e.Do("GET", "/npm/is-thing", routetest.With(hdr, "Accept", "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8"), "")
		if r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/vnd.npm.install-v1+json") || !strings.Contains(r.Body, `"modified"`) {
			t.Errorf("abbreviated: %d %v %s", r.Status, r.Header, r.Body)
		}
		// A foreign tarball host, and a tarball of another package on the
		// registry: both versions gone, and the latest tag with them.
		r = e.Do("GET", "/npm/is-other", hdr, "")
		var doc struct {
			DistTags map[string]string          `json:"dist-tags"`
			Versions map[string]json.RawMessage `json:"versions"`
		}
		if err := json.Unmarshal([]byte(r.Body), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Versions) != 1 || doc.Versions["1.0.0"] == nil || len(doc.DistTags) != 0 || strings.Contains(r.Body, "evil.example") {
			t.Errorf("foreign tarballs kept: %s", r.Body)
		}
		// The tarball, byte for byte.
		r = e.Do("GET", "/npm/is-thing/-/is-thing-1.1.0.tgz", hdr, "")
		want, _ := fakes.NPMTarball("is-thing", "1.1.0")
		if r.Status != 200 || r.Body != string(want) {
			t.Errorf("tarball: %d, %d bytes", r.Status, len(r.Body))
		}
		r = e.Do("GET", "/npm/-/ping", hdr, "")
		if r.Status != 200 {
			t.Errorf("ping: %d %s", r.Status, r.Body)
		}
		r = e.Do("GET", "/npm/is-nothing", hdr, "")
		if r.Status != 404 {
			t.Errorf("missing package: %d %s", r.Status, r.Body)
		}
		for _, q := range reg.Requests() {
			if a := q.Header.Get("Authorization"); a != "Bearer "+canaryNPM {
				t.Errorf("%s %s: Authorization %q", q.Method, q.Path, a)
			}
			for k, vs := range q.Header {
				for _, v := range vs {
					if strings.Contains(v, "cpx_") {
						t.Errorf("%s %s: sandbox token in %s", q.Method, q.Path, k)
					}
				}
			}
			if q.Path == "/@acme/util" || strings.Contains(q.Path, "..") {
				t.Errorf("upstream path %q", q.Path)
			}
		}
	}
}

func integrityOf(b []byte) string {
	sum := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

func TestNPMNoCredentialUpstream(t *testing.T) {
	reg := fakes.NewNPMRegistry(fakes.NPMRegistryOptions{})
	t.Cleanup(reg.Close)
	reg.AddPackage("is-thing", "1.0.0")
	u, _ := url.Parse(reg.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u}), routetest.WithPolicy(t, npmPolicy))
	tok := e.Token("conv-42")
	r := e.Do("GET", "/npm/is-thing", routetest.Bearer(tok), "")
	if r.Status != 200 || !strings.Contains(r.Body, e.Proxy.URL+"/npm/is-thing/-/is-thing-1.0.0.tgz") {
		t.Errorf("%d %s", r.Status, r.Body)
	}
	for _, q := range reg.Requests() {
		if a := q.Header.Get("Authorization"); a != "" {
			t.Errorf("Authorization %q sent to a registry with no credential", a)
		}
	}
}

func TestNPMUpstreamRefusesCredential(t *testing.T) {
	reg := fakes.NewNPMRegistry(fakes.NPMRegistryOptions{Token: "something-else"})
	t.Cleanup(reg.Close)
	e := newNPMEnv(t, reg, "")
	r := e.Do("GET", "/npm/is-thing", routetest.Bearer(e.Token("conv-42")), "")
	if r.Status != 502 || !strings.Contains(r.Body, "refused cproxy's npm credential") {
		t.Errorf("%d %s", r.Status, r.Body)
	}
}

func TestRewritePackument(t *testing.T) {
	base, _ := url.Parse("https://registry.example/sub/")
	rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "@a/b"}, public: "http://p:1"}
	in := `{"name":"@a/b","dist-tags":{"latest":"2.0.0","old":"1.0.0","beta":"3.0.0"},
"versions":{
 "1.0.0":{"dist":{"integrity":"sha512-AAA\u002b==","shasum":"abc","tarball":"https://registry.example/sub/@a/b/-/b-1.0.0.tgz"},"x":[1, 2]},
 "2.0.0":{"dist":{"integrity":"sha512-BBB","tarball":"https://other.example/sub/@a/b/-/b-2.0.0.tgz"}},
 "3.0.0":{"dist":{"tarball":"http://registry.example/sub/@a/b/-/b-3.0.0.tgz"}},
 "4.0.0":{"dist":{"tarball":"https://registry.example/@a/b/-/b-4.0.0.tgz"}},
 "5.0.0":{"dist":{"tarball":"https://registry.example/sub/@a/b/-/b-5.0.0.tgz?x=1"}},
 "6.0.0":{"dist":{"tarball":"https://registry.example/sub/@a/b/-/../../../c/-/c-6.0.0.tgz"}},
 "7.0.0":{"nodist":true}
},"time":{"1.0.0":"t"}}`
	out, err := rewritePackument([]byte(in), base, rw)
	if err != nil {
		t.Fatal(err)
	}
	// Top-level keys keep their order, but dist-tags, which depends on the
	// versions dropped, goes last.
	want := `{"name":"@a/b","versions":{"1.0.0":{"dist":{"integrity":"sha512-AAA\u002b==","shasum":"abc","tarball":"http://p:1/npm/@a/b/-/b-1.0.0.tgz"},"x":[1,2]}},"time":{"1.0.0":"t"},"dist-tags":{"old":"1.0.0"}}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	if _, err := rewritePackument([]byte(`[1]`), base, rw); err == nil {
		t.Error("a JSON array was rewritten")
	}
}

func TestNPMPackumentLimits(t *testing.T) {
	// A gzip upstream answer that is not gzip, an encoding cproxy cannot
	// read, and one too large: 502, in npm's shape.
	for _, c := range []struct {
		name, ce string
		body     []byte
		want     string
	}{
		{"bad gzip", "gzip", []byte("not gzip"), "not valid gzip"},
		{"br", "br", []byte("x"), "cannot read"},
		{"too large", "", []byte(`{"versions":{"1.0.0":{"x":"` + strings.Repeat("a", maxPackument) + `"}}}`), "larger than 64 MiB"},
		{"a string too large", "", []byte(`{"readme":"` + strings.Repeat("a", maxPackument) + `"}`), "larger than 64 MiB where cproxy must hold it (readme)"},
	} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ae := r.Header.Get("Accept-Encoding"); ae != "gzip" {
				t.Errorf("Accept-Encoding upstream %q", ae)
			}
			if c.ce != "" {
				w.Header().Set("Content-Encoding", c.ce)
			}
			w.Write(c.body)
		}))
		u, _ := url.Parse(up.URL)
		e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u}), routetest.WithPolicy(t, npmPolicy))
		r := e.Do("GET", "/npm/is-thing", routetest.With(routetest.Bearer(e.Token("conv-42")), "Accept-Encoding", "br"), "")
		if r.Status != 502 || !strings.Contains(r.Body, c.want) {
			t.Errorf("%s: %d %q", c.name, r.Status, routes.Clip(r.Body, 200))
		}
		up.Close()
	}
	// gzip round trip of a valid packument through a plain upstream.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`{"name":"is-thing","versions":{}}`))
	zw.Close()
	zr, _ := gzip.NewReader(bytes.NewReader(buf.Bytes()))
	b, _ := io.ReadAll(zr)
	if string(b) == "" {
		t.Fatal("gzip")
	}
}

func TestNPMNotModified(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") != `W/"abc"` {
			t.Errorf("If-None-Match %q", r.Header.Get("If-None-Match"))
		}
		w.Header().Set("Etag", `"abc"`)
		w.WriteHeader(http.StatusNotModified)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u}), routetest.WithPolicy(t, npmPolicy))
	r := e.Do("GET", "/npm/is-thing", routetest.With(routetest.Bearer(e.Token("conv-42")), "If-None-Match", `W/"abc"`), "")
	if r.Status != 304 || r.Header.Get("Etag") != `W/"abc"` {
		t.Errorf("%d %v", r.Status, r.Header)
	}
}

const npmAuditPolicy = `
[profile.default]
packages = ["is-*", "@acme/*"]
npm = { search = true, audit = true }
`

func gz(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.String()
}

// With npm.search and npm.audit on, search goes upstream with its query
// rebuilt, and an audit body goes byte for byte once every package it
// names is allowed; anything else is refused before the registry sees it.
func TestNPMSearchAndAudit(t *testing.T) {
	reg := newNPMRegistry(t, false)
	reg.AddAdvisory("is-thing", "<1.1.0", "high", "ReDoS in is-thing")
	u, _ := url.Parse(reg.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, Credential: secrets.New(canaryNPM), HeaderTimeout: 10 * time.Second}), routetest.WithPolicy(t, npmAuditPolicy))
	auth := routetest.Bearer(e.Token("conv-42"))

	r := e.Do("GET", "/npm/-/v1/search?text=is-&size=20&quality=0.65", auth, "")
	if r.Status != 200 || !strings.Contains(r.Body, `"name":"is-thing"`) {
		t.Fatalf("search = %d %s", r.Status, r.Body)
	}
	reqs := reg.Requests()
	if got := reqs[len(reqs)-1]; got.Path != "/-/v1/search" || got.Header.Get("Authorization") != "Bearer "+canaryNPM {
		t.Errorf("search upstream: %s %v", got.Path, got.Header)
	}

	body := gz(`{"is-thing":["1.0.0"],"@acme/util":["2.0.0","2.0.0-rc.1"]}`)
	hdr := map[string]string{"Authorization": auth["Authorization"], "Content-Encoding": "gzip", "Content-Type": "application/json"}
	r = e.Do("POST", "/npm/-/npm/v1/security/advisories/bulk", hdr, body)
	if r.Status != 200 || !strings.Contains(r.Body, `"title":"ReDoS in is-thing"`) {
		t.Fatalf("audit = %d %s", r.Status, r.Body)
	}
	reqs = reg.Requests()
	if got := reqs[len(reqs)-1]; string(got.Body) != body || got.Header.Get("Content-Encoding") != "gzip" || got.Header.Get("Authorization") != "Bearer "+canaryNPM {
		t.Errorf("audit upstream got %q (%v), want the exact gzip bytes sent", got.Body, got.Header)
	}
	plain := map[string]string{"Authorization": auth["Authorization"], "Content-Type": "application/json"}
	if r := e.Do("POST", "/npm/-/npm/v1/security/advisories/bulk", plain, `{"is-thing":["1.0.0"]}`); r.Status != 200 {
		t.Errorf("uncompressed audit = %d %s", r.Status, r.Body)
	}

	n := len(reg.Requests())
	for _, c := range []struct {
		hdr    map[string]string
		body   string
		status int
		msg    string
	}{
		{hdr, gz(`{"is-thing":["1.0.0"],"left-pad":["1.3.0"]}`), 403, "the audit names package left-pad, which is not allowed for sandbox conv-42"},
		{hdr, gz(`{"is-thing":["1.0.0"],"is-thing":["1.0.0"],"left-pad":[]}`), 403, "left-pad"},
		{hdr, gz(`{"../x":["1.0.0"]}`), 403, `the audit names "../x", which is not an npm package name`},
		{hdr, gz(`{"is-thing":"1.0.0"}`), 400, "the versions of is-thing are not an array"},
		{hdr, gz(`{"is-thing":["1.0.0; rm -rf"]}`), 400, "a version of is-thing is not a version"},
		{hdr, gz(`{"is-thing":[1]}`), 400, "a version of is-thing is not a version"},
		{hdr, gz(`{"is-thing":["1.0.0"]} {"left-pad":["1.3.0"]}`), 400, "data after the object"},
		{hdr, gz(`{"is-thing":["1.0.0"]}`) + gz(`{"left-pad":["1.3.0"]}`), 400, "data after the object"},
		{hdr, gz(`["is-thing"]`), 400, "not a JSON object"},
		{hdr, "not gzip", 400, "not valid gzip"},
		{hdr, gz(`{"is-thing":["1.0.0"]`), 400, "malformed JSON"},
		{map[string]string{"Authorization": auth["Authorization"], "Content-Encoding": "br"}, "x", 400, `Content-Encoding "br" is not accepted`},
		{hdr, strings.Repeat("x", maxAuditBody+1), 413, "over the 4 MiB limit"},
		{map[string]string{"Content-Encoding": "gzip"}, gz(`{"is-thing":["1.0.0"]}`), 401, "no sandbox token"},
	} {
		r := e.Do("POST", "/npm/-/npm/v1/security/advisories/bulk", c.hdr, c.body)
		var got struct{ Error string }
		json.Unmarshal([]byte(r.Body), &got)
		if r.Status != c.status || !strings.Contains(got.Error, c.msg) {
			t.Errorf("audit of %q = %d %s, want %d %q", routes.Clip(c.body, 60), r.Status, r.Body, c.status, c.msg)
		}
	}
	if got := reg.Requests(); len(got) != n {
		t.Errorf("refused audits reached the registry: %+v", got[n:])
	}
}

// TestNPMUpstreamStatus: a packument or tarball answer npm would take as a
// success is passed only when cproxy checked it: 200, or a 304 to a request
// cproxy sent with a validator. Errors pass as they are.
func TestNPMUpstreamStatus(t *testing.T) {
	var code int
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code != http.StatusNotModified {
			w.Write([]byte(`{"name":"is-thing","versions":{}}`))
		}
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u}), routetest.WithPolicy(t, "[profile.default]\npackages = [\"is-*\"]\n"))
	tok := e.Token("conv-42")
	for _, c := range []struct {
		code int
		path string
		hdr  []string
		want int
	}{
		{200, "/npm/is-thing", nil, 200},
		{203, "/npm/is-thing", nil, 502},
		{206, "/npm/is-thing", nil, 502},
		{299, "/npm/is-thing/-/is-thing-1.0.0.tgz", nil, 502},
		{304, "/npm/is-thing", nil, 502},
		{304, "/npm/is-thing", []string{"If-None-Match", `W/"abc"`}, 304},
		{304, "/npm/is-thing/-/is-thing-1.0.0.tgz", []string{"If-Modified-Since", "Mon, 30 Nov 2026 00:00:00 GMT"}, 304},
		{300, "/npm/is-thing", nil, 502},
		{404, "/npm/is-thing", nil, 404},
		{503, "/npm/is-thing/-/is-thing-1.0.0.tgz", nil, 503},
	} {
		code = c.code
		h := routetest.Bearer(tok)
		for i := 0; i+1 < len(c.hdr); i += 2 {
			h = routetest.With(h, c.hdr[i], c.hdr[i+1])
		}
		r := e.Do("GET", c.path, h, "")
		if r.Status != c.want || c.want == 502 && !strings.Contains(r.Body, "npm route: the upstream "+u.Host+" answered "+strconv.Itoa(c.code)+" for the ") {
			t.Errorf("%d for %s %v: %d %s, want %d", c.code, c.path, c.hdr, r.Status, r.Body, c.want)
		}
	}
}

// TestNPMWithoutUpstreamSaysWhatToSet: a server whose config gives the npm
// route no upstream refuses its requests naming the config keys to set.
func TestNPMWithoutUpstreamSaysWhatToSet(t *testing.T) {
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{}))
	r := e.Do("GET", "/npm/left-pad", routetest.Bearer(e.Token("conv-1")), "")
	if r.Status != 403 || !strings.Contains(r.Body, "has no upstream: the operator must set upstream.npm.url (and upstream.npm.credential) in cproxy's config; do not retry") {
		t.Errorf("got %d %s", r.Status, r.Body)
	}
}
