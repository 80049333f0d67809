package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/routes/model"
	"github.com/cproxy/cproxy/routes/relay"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// downStore is a real store whose look-ups fail, while down is set, the
// way a PostgreSQL that went away fails them: at once with a connection
// error, or (hang) only when the caller gives up.
type downStore struct {
	tokens.Store
	down, hang atomic.Bool
}

var errStoreDown = errors.New("look up token: failed to connect to host=10.9.8.7 user=cproxy: connection refused")

func (s *downStore) Lookup(ctx context.Context, h tokens.Hash) (tokens.Record, error) {
	switch {
	case s.hang.Load():
		<-ctx.Done()
		return tokens.Record{}, ctx.Err()
	case s.down.Load():
		return tokens.Record{}, errStoreDown
	}
	return s.Store.Lookup(ctx, h)
}

type readyAnswer struct {
	Status string   `json:"status"`
	Failed []string `json:"failed"`
	Error  string   `json:"error"`
}

func readyz(t *testing.T, e *routetest.Env) (int, readyAnswer, string) {
	t.Helper()
	code, _, body := call(t, e, "GET", "/readyz", "")
	var a readyAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("GET /readyz = %d %q: not JSON", code, body)
	}
	return code, a, body
}

func TestReadyz(t *testing.T) {
	var st *downStore
	key := filepath.Join(t.TempDir(), "anthropic-key")
	if err := os.WriteFile(key, []byte(routetest.CanaryKey), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := new(secrets.Loader).Live("anthropic", secrets.Source("file:"+key), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, up := routetest.Anthropic(t)
	up.Live = live
	e := routetest.New(t, routetest.Serve(model.Kind, up), func(o *routetest.Options) {
		st = &downStore{Store: o.Store}
		o.Store = st
	})

	if code, a, body := readyz(t, e); code != 200 || a.Status != "ready" || body != `{"status":"ready"}`+"\n" {
		t.Fatalf("a replica that can serve: %d %s", code, body)
	}

	// The store fails a look-up: not ready, saying which check and the fix,
	// without the store's error (it is in the log, once).
	st.down.Store(true)
	for range 2 {
		code, a, body := readyz(t, e)
		if code != 503 || a.Status != "not ready" || !slices.Equal(a.Failed, []string{"store"}) ||
			a.Error != "cproxy: not ready: the token store failed a look-up: check that its database is up and reachable from this replica (the log has the error)" {
			t.Fatalf("store failing: %d %s", code, body)
		}
		if strings.Contains(body, "10.9.8.7") {
			t.Errorf("the answer holds the store's error: %s", body)
		}
	}
	if n := strings.Count(e.Logs.String(), `"msg":"not ready: GET /readyz answers 503"`); n != 1 || !strings.Contains(e.Logs.String(), "10.9.8.7") {
		t.Errorf("want one log line with the store's error, got %d:\n%s", n, e.Logs)
	}

	// A prober that gives up before the store answers learns nothing, and
	// neither does the log.
	st.hang.Store(true)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	admin.Handler(e.Server, client.Serving{}).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil).WithContext(gone))
	if n := strings.Count(e.Logs.String(), `"msg":"not ready: GET /readyz answers 503"`); n != 1 || rec.Body.Len() != 0 {
		t.Errorf("a probe cut short: %d log lines, answered %d %q", n, rec.Code, rec.Body)
	}

	// A store that does not answer: not ready once ReadyTimeout has passed.
	if code, a, body := readyz(t, e); code != 503 || !slices.Equal(a.Failed, []string{"store"}) ||
		!strings.Contains(a.Error, fmt.Sprintf("the token store did not answer a look-up within %s", routes.ReadyTimeout)) {
		t.Fatalf("store hanging: %d %s", code, body)
	}

	// It answers again: ready, without a restart.
	st.hang.Store(false)
	st.down.Store(false)
	if code, _, body := readyz(t, e); code != 200 {
		t.Fatalf("store back: %d %s", code, body)
	}
	if !strings.Contains(e.Logs.String(), `"msg":"ready: every readiness check passes again"`) {
		t.Errorf("no log line for ready again:\n%s", e.Logs)
	}

	// A file credential that became unreadable: not ready, naming the
	// config key, not the file; the credential in force still serves.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	code, a, body := readyz(t, e)
	if code != 503 || !slices.Equal(a.Failed, []string{"credential"}) ||
		a.Error != "cproxy: not ready: the credential source of upstream.anthropic.credential (file) cannot be read: fix it, then send SIGHUP (the log has why; requests still get the credential loaded before)" {
		t.Fatalf("credential file removed: %d %s", code, body)
	}
	if strings.Contains(body, key) {
		t.Errorf("the answer names the credential's file: %s", body)
	}
	if !strings.Contains(e.Logs.String(), "file:"+key+": no such file") {
		t.Errorf("the log does not say why:\n%s", e.Logs)
	}
	if r := modelRequest(e, e.Token("conv-1")); r.Status != 200 {
		t.Errorf("a request with the credential in force = %d %s", r.Status, r.Body)
	}

	// Every check that fails is named.
	e.Server.SetPolicy(nil)
	st.down.Store(true)
	if code, a, body := readyz(t, e); code != 503 || !slices.Equal(a.Failed, []string{"store", "policy", "credential"}) ||
		!strings.Contains(a.Error, "; no policy is loaded: fix the policy file") {
		t.Fatalf("three checks failing: %d %s", code, body)
	}

	// It takes no parameters and only GET.
	if code, _, body := call(t, e, "GET", "/readyz?verbose=1", ""); code != 400 || !strings.Contains(body, `unknown parameter \"verbose\" (this endpoint takes no query parameters)`) {
		t.Errorf("GET /readyz?verbose=1 = %d %s", code, body)
	}
	if code, allow, body := call(t, e, "POST", "/readyz", ""); code != 405 || allow != "GET" {
		t.Errorf("POST /readyz = %d %s", code, body)
	}
	// The proxy listener, which the sandboxes reach, does not answer it.
	if r := e.Do("GET", "/readyz", nil, ""); r.Status != 403 {
		t.Errorf("GET /readyz on the proxy listener = %d %s", r.Status, r.Body)
	}
}

// Each credential is named by its config key: an expired claude-code
// login with the reason routes give clients, a relay's header credential
// by the name the relay gives it.
func TestReadyzCredentialNames(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CLAUDE_CONFIG_DIR", dir)
	login := fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"expiresAt":%d}}`, routetest.CanaryOAuth, time.Now().Add(-time.Hour).UnixMilli())
	if err := os.WriteFile(filepath.Join(dir, ".credentials.json"), []byte(login), 0o600); err != nil {
		t.Fatal(err)
	}
	claude, err := new(secrets.Loader).Live("anthropic", "claude-code", nil)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "mod-key")
	if err := os.WriteFile(key, []byte(routetest.CanaryKey), 0o600); err != nil {
		t.Fatal(err)
	}
	mod, err := new(secrets.Loader).Live("relay.mod", secrets.Source("file:"+key), nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(key)
	_, up := routetest.Anthropic(t)
	up.Live, up.Auth = claude, "oauth"
	e := routetest.New(t, routetest.Serve(model.Kind, up), func(o *routetest.Options) {
		o.Relays = []relay.Relay{{Rules: &policy.Relay{Name: "mod"}, Prefix: "/mod/", Headers: []relay.Header{{Name: "X-Mod-Token", Live: mod}}}}
	})
	code, a, body := readyz(t, e)
	if code != 503 || !slices.Equal(a.Failed, []string{"credential", "credential"}) ||
		!strings.HasPrefix(a.Error, "cproxy: not ready: upstream.anthropic.credential: claude-code: Claude Code's login on the cproxy host expired (at ") ||
		!strings.HasSuffix(a.Error, "; the credential source of relay.mod (header X-Mod-Token) (file) cannot be read: fix it, then send SIGHUP (the log has why; requests still get the credential loaded before)") {
		t.Fatalf("%d %s", code, body)
	}
	if strings.Contains(body, dir) {
		t.Errorf("the answer names a file: %s", body)
	}
}
