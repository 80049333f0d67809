package routes

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

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

// TestExpiredClaudeCodeToken: an expired claude-code token is not sent; the
// client gets 503 in Anthropic's shape, with the reason and no retry.
func TestExpiredClaudeCodeToken(t *testing.T) {
	if runtime.GOOS == "darwin" {
		t.Skip("claude-code reads the macOS Keychain first; not tested there")
	}
	dir := t.TempDir()
	t.Setenv("CLAUDE_CONFIG_DIR", dir)
	body := fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"expiresAt":%d}}`, canaryOAuth, time.Now().Add(-time.Minute).UnixMilli())
	os.WriteFile(filepath.Join(dir, ".credentials.json"), []byte(body), 0o600)
	live, err := new(secrets.Loader).Live("anthropic", "claude-code", nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *testOptions) { o.Anthropic = Upstream{URL: o.Anthropic.URL, Live: live, Auth: "oauth"} })
	r := e.do("POST", "/v1/messages", bearer(e.token("conv-1")), hello)
	typ, msg := errorType(t, r)
	if r.status != 503 || typ != "api_error" || r.header.Get("X-Should-Retry") != "false" ||
		!strings.HasPrefix(msg, "cproxy: claude-code: Claude Code's login on the cproxy host expired") || strings.Contains(msg, dir) {
		t.Fatalf("got %d %s %s", r.status, typ, msg)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("the expired token was sent: %d requests upstream", n)
	}
}
