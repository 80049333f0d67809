package npm

import (
	"net/url"
	"os"
	"path/filepath"
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
