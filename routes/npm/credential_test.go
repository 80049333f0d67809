package npm

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// TestLiveCredential: the npm credential, when it is Live, is read per
// request, so a reload changes what the next request carries.
func TestLiveCredential(t *testing.T) {
	reg := newNPMRegistry(t, false)
	path := filepath.Join(t.TempDir(), "npm.key")
	if err := os.WriteFile(path, []byte("npm_not-yet"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := new(secrets.Loader).Live("npm", secrets.Source("file:"+path), nil)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(reg.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, Live: live, HeaderTimeout: 10 * time.Second}),
		routetest.WithPolicy(t, npmPolicy), func(o *routetest.Options) { o.Canaries = append(o.Canaries, canaryNPM) })
	tok := e.Token("ci-1")
	if r := e.Do("GET", "/npm/is-thing", routetest.Bearer(tok), ""); r.Status != 502 {
		t.Fatalf("the first credential: got %d %s", r.Status, r.Body)
	}
	os.WriteFile(path, []byte(canaryNPM), 0o600)
	live.Reload()
	if r := e.Do("GET", "/npm/is-thing", routetest.Bearer(tok), ""); r.Status != 200 {
		t.Fatalf("after the reload: got %d %s", r.Status, r.Body)
	}
}

// TestMissingCredential: with no npm credential, a request the policy
// allows is answered 503 (the operator must set one), but one it refuses
// gets the policy's refusal first: a sandbox is told "not allowed", not to
// wait for an operator, for what it may never do.
func TestMissingCredential(t *testing.T) {
	reg := newNPMRegistry(t, false)
	u, _ := url.Parse(reg.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u, Missing: "the operator must set NPM_TOKEN", HeaderTimeout: 10 * time.Second}),
		routetest.WithPolicy(t, npmPolicy))
	h := routetest.Bearer(e.Token("ci-1"))
	if r := e.Do("GET", "/npm/is-thing", h, ""); r.Status != 503 || !strings.Contains(r.Body, "no npm credential is configured: the operator must set NPM_TOKEN") {
		t.Fatalf("allowed: got %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"/npm/left-pad", "/npm/left-pad/-/left-pad-1.3.0.tgz"} {
		if r := e.Do("GET", path, h, ""); r.Status != 403 || !strings.Contains(r.Body, "package left-pad is not allowed for sandbox ci-1") {
			t.Fatalf("refused %s: got %d %s", path, r.Status, r.Body)
		}
	}
}
