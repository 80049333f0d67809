package npm

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/secrets"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
)

const npmVersionPolicy = `
[profile.default]
packages = ["is-*", "@acme/*"]

[profile.default.npm]
min_release_age = "3d"
deny = [
  { package = "is-thing", versions = "1.1.0", reason = "compromised release" },
  { package = "@acme/*", versions = ">=2.0.0 <2.0.3" },
]
`

var npmNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newNPMVersionEnv(t *testing.T, reg *fakes.NPMRegistry) *routetest.Env {
	u, _ := url.Parse(reg.URL)
	return routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, Credential: secrets.New(canaryNPM), HeaderTimeout: 10 * time.Second}), routetest.WithPolicy(t, npmVersionPolicy), func(o *routetest.Options) {
		o.PublicURL = "http://proxy.example:8080"
		o.Now = func() time.Time { return npmNow }
	})
}

type packument struct {
	DistTags map[string]string          `json:"dist-tags"`
	Versions map[string]json.RawMessage `json:"versions"`
	Time     map[string]string          `json:"time"`
}

func TestNPMVersionPolicy(t *testing.T) {
	reg := fakes.NewNPMRegistry(fakes.NPMRegistryOptions{Token: canaryNPM, Gzip: true})
	t.Cleanup(reg.Close)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(reg.AddPackage("is-thing", "1.0.0", "1.0.1", "1.1.0"))               // 1.1.0 denied, latest
	must(reg.AddPackage("is-young", "1.0.0", "1.1.0-rc.1", "1.0.5", "2.0.0")) // 2.0.0 too young, latest
	must(reg.AddPackage("@acme/util", "1.9.0", "2.0.2", "2.0.3"))
	must(reg.SetPublishTime("is-young", "2.0.0", npmNow.Add(-time.Hour)))
	must(reg.SetPublishTime("is-young", "1.0.5", time.Time{})) // no time: hidden
	e := newNPMVersionEnv(t, reg)
	tok := e.Token("conv-42")
	get := func(name string, accept string) packument {
		t.Helper()
		hdr := routetest.Bearer(tok)
		if accept != "" {
			hdr = routetest.With(hdr, "Accept", accept)
		}
		r := e.Do("GET", "/npm/"+name, hdr, "")
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", name, r.Status, r.Body)
		}
		var p packument
		if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
			t.Fatalf("%s: %v: %s", name, err, r.Body)
		}
		return p
	}
	keys := func(m map[string]json.RawMessage) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return strings.Join(sortStrings(ks), " ")
	}

	p := get("is-thing", "")
	if keys(p.Versions) != "1.0.0 1.0.1" || p.DistTags["latest"] != "1.0.1" || p.Time["1.1.0"] != "" || p.Time["1.0.0"] == "" {
		t.Errorf("is-thing: %+v", p)
	}
	// npm's abbreviated Accept: cproxy asks for the full packument, which has time.
	p = get("is-young", "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8")
	if keys(p.Versions) != "1.0.0 1.1.0-rc.1" || p.DistTags["latest"] != "1.0.0" || p.Time["2.0.0"] != "" {
		t.Errorf("is-young: %+v", p)
	}
	p = get("@acme%2futil", "")
	if keys(p.Versions) != "1.9.0 2.0.3" || p.DistTags["latest"] != "2.0.3" {
		t.Errorf("@acme/util: %+v", p)
	}
	// Integrity unchanged; no validators, and none sent upstream.
	r := e.Do("GET", "/npm/@acme/util", routetest.With(routetest.Bearer(tok), "If-None-Match", `W/"x"`), "")
	if r.Status != 200 || r.Header.Get("Etag") != "" || r.Header.Get("Last-Modified") != "" {
		t.Errorf("validators with a version policy: %d %v", r.Status, r.Header)
	}
	if q := reg.Requests(); q[len(q)-1].Header.Get("If-None-Match") != "" {
		t.Errorf("If-None-Match forwarded")
	}
	tgz, _ := fakes.NPMTarball("@acme/util", "2.0.3")
	if !strings.Contains(r.Body, integrityOf(tgz)) {
		t.Errorf("integrity changed: %s", r.Body)
	}

	// A denied version's tarball: 403 in npm's shape, nothing forwarded.
	before := len(reg.Requests())
	npmRefused(t, e, "GET", "/npm/is-thing/-/is-thing-1.1.0.tgz", routetest.Bearer(tok), 403,
		`cproxy: is-thing@1.1.0 is not allowed for sandbox conv-42: it is denied by the sandbox's policy (versions "1.1.0"): compromised release`)
	npmRefused(t, e, "GET", "/npm/@acme/util/-/util-2.0.2.tgz", routetest.Bearer(tok), 403,
		`cproxy: @acme/util@2.0.2 is not allowed for sandbox conv-42: it is denied by the sandbox's policy (versions ">=2.0.0 <2.0.3")`)
	if n := len(reg.Requests()); n != before {
		t.Errorf("denied tarballs reached the registry: %d requests", n-before)
	}
	r = e.Do("GET", "/npm/is-thing/-/is-thing-1.0.1.tgz", routetest.Bearer(tok), "")
	if r.Status != 200 {
		t.Errorf("allowed tarball: %d %s", r.Status, r.Body)
	}
	// Too young, or no publish time: cproxy reads the full packument's time
	// (with the real token) and refuses; the tarball is never fetched.
	before = len(reg.Requests())
	npmRefused(t, e, "GET", "/npm/is-young/-/is-young-2.0.0.tgz", routetest.Bearer(tok), 403,
		`cproxy: is-young@2.0.0 is 1 hour old; the minimum release age for sandbox conv-42 is 3 days (newest allowed: 1.0.0; this one is allowed from 2026-12-03T11:00:00Z)`)
	npmRefused(t, e, "GET", "/npm/is-young/-/is-young-1.0.5.tgz", routetest.Bearer(tok), 403,
		`cproxy: is-young@1.0.5 is not allowed for sandbox conv-42: the registry gives no publish time for it and the sandbox's policy needs versions at least 3d old`)
	reqs := reg.Requests()[before:]
	if len(reqs) != 2 || reqs[0].Path != "/is-young" || reqs[0].Header.Get("Accept") != "application/json" || reqs[0].Header.Get("Authorization") != "Bearer "+canaryNPM {
		t.Errorf("age checks sent %+v", reqs)
	}
	r = e.Do("GET", "/npm/is-young/-/is-young-1.0.0.tgz", routetest.Bearer(tok), "")
	if r.Status != 200 {
		t.Errorf("old enough tarball: %d %s", r.Status, r.Body)
	}
	r = e.Do("GET", "/npm/@acme/util/-/util-2.0.3.tgz", routetest.Bearer(tok), "")
	if r.Status != 200 {
		t.Errorf("scoped old enough tarball: %d %s", r.Status, r.Body)
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestRewritePackumentVersionPolicy(t *testing.T) {
	base, _ := url.Parse("https://registry.example/")
	pr := routetest.MustPolicy(t, npmVersionPolicy).Profiles["default"]
	rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-x"}, public: "http://p:1", profile: pr, now: npmNow}
	tb := func(v string) string {
		return `{"dist":{"integrity":"sha512-` + v + `","tarball":"https://registry.example/is-x/-/is-x-` + v + `.tgz"}}`
	}
	in := `{"name":"is-x","dist-tags":{"latest":"3.0.0","next":"3.1.0-rc.1","old":"1.0.0"},
"versions":{"1.0.0":` + tb("1.0.0") + `,"2.0.0":` + tb("2.0.0") + `,"2.1.0-rc.1":` + tb("2.1.0-rc.1") + `,"3.0.0":` + tb("3.0.0") + `,"3.1.0-rc.1":` + tb("3.1.0-rc.1") + `},
"time":{"created":"2020-01-01T00:00:00Z","1.0.0":"2020-01-01T00:00:00.000Z","2.0.0":"2026-11-01T00:00:00Z","2.1.0-rc.1":"2026-11-02T00:00:00Z","3.0.0":"2026-11-29T00:00:00Z","3.1.0-rc.1":"bad"}}`
	out, err := rewritePackument([]byte(in), base, rw)
	if err != nil {
		t.Fatal(err)
	}
	var p packument
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	if keys := strings.Join(sortStrings(mapKeys(p.Versions)), " "); keys != "1.0.0 2.0.0 2.1.0-rc.1" {
		t.Errorf("versions %s", keys)
	}
	// latest moves to the highest release left (not the pre-release); next goes.
	if len(p.DistTags) != 2 || p.DistTags["latest"] != "2.0.0" || p.DistTags["old"] != "1.0.0" {
		t.Errorf("dist-tags %v", p.DistTags)
	}
	if _, ok := p.Time["3.0.0"]; ok || p.Time["created"] == "" || len(p.Time) != 4 {
		t.Errorf("time %v", p.Time)
	}
	// Without a policy nothing but foreign tarballs is removed.
	rw.profile = nil
	out, _ = rewritePackument([]byte(in), base, rw)
	if err := json.Unmarshal(out, &p); err != nil || len(p.Versions) != 5 || p.DistTags["latest"] != "3.0.0" {
		t.Errorf("no policy: %s", out)
	}
}

func mapKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
