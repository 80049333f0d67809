package routes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cproxy/cproxy/secrets"
)

// liveFile returns a Live credential read from a file holding v, and the file.
func liveFile(t *testing.T, name, v string) (*secrets.Live, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".key")
	if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := new(secrets.Loader).Live(name, secrets.Source("file:"+path), nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, path
}

// TestLiveCredential: a Live credential is read per request, so a reload
// changes what the next request carries (routes/npm tests the npm route's).
func TestLiveCredential(t *testing.T) {
	live, path := liveFile(t, "anthropic", "sk-ant-api03-not-yet")
	e := newEnv(t, func(o *testOptions) { o.Anthropic = Upstream{URL: o.Anthropic.URL, Live: live, Auth: "api-key"} })
	tok := e.token("conv-1")
	if r := e.do("POST", "/v1/messages", bearer(tok), hello); r.status != 401 {
		t.Fatalf("the first credential: got %d %s", r.status, r.body)
	}
	os.WriteFile(path, []byte(canaryKey), 0o600)
	live.Reload()
	if r := e.do("POST", "/v1/messages", bearer(tok), hello); r.status != 200 {
		t.Fatalf("after the reload: got %d %s", r.status, r.body)
	}
	reqs := e.fake.Requests()
	if got := reqs[len(reqs)-1].Header.Get("X-Api-Key"); got != canaryKey {
		t.Fatal("the upstream did not get the reloaded credential")
	}

}
