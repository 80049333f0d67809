package routes

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

func (e *env) readyz() (int, readyAnswer, string) {
	e.t.Helper()
	r := e.doAt(e.admin.URL, "GET", "/readyz", nil, "")
	var a readyAnswer
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		e.t.Fatalf("GET /readyz = %d %q: not JSON", r.status, r.body)
	}
	return r.status, a, r.body
}

func TestReadyz(t *testing.T) {
	var st *downStore
	key := filepath.Join(t.TempDir(), "anthropic-key")
	if err := writeFile(key, canaryKey); err != nil {
		t.Fatal(err)
	}
	live, err := new(secrets.Loader).Live("anthropic", secrets.Source("file:"+key), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *testOptions) {
		st = &downStore{Store: o.Store}
		o.Store = st
		o.Anthropic.Live = live
	})

	if code, a, body := e.readyz(); code != 200 || a.Status != "ready" || body != `{"status":"ready"}`+"\n" {
		t.Fatalf("a replica that can serve: %d %s", code, body)
	}

	// The store fails a look-up: not ready, saying which check and the fix,
	// without the store's error (it is in the log, once).
	st.down.Store(true)
	for range 2 {
		code, a, body := e.readyz()
		if code != 503 || a.Status != "not ready" || !slices.Equal(a.Failed, []string{"store"}) ||
			a.Error != "cproxy: not ready: the token store failed a look-up: check that its database is up and reachable from this replica (the log has the error)" {
			t.Fatalf("store failing: %d %s", code, body)
		}
		if strings.Contains(body, "10.9.8.7") {
			t.Errorf("the answer holds the store's error: %s", body)
		}
	}
	if n := strings.Count(e.logs.String(), `"msg":"not ready: GET /readyz answers 503"`); n != 1 || !strings.Contains(e.logs.String(), "10.9.8.7") {
		t.Errorf("want one log line with the store's error, got %d:\n%s", n, e.logs)
	}

	// A prober that gives up before the store answers learns nothing, and
	// neither does the log.
	st.hang.Store(true)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	e.srv.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil).WithContext(gone))
	if n := strings.Count(e.logs.String(), `"msg":"not ready: GET /readyz answers 503"`); n != 1 || rec.Body.Len() != 0 {
		t.Errorf("a probe cut short: %d log lines, answered %d %q", n, rec.Code, rec.Body)
	}

	// A store that does not answer: not ready once ReadyTimeout has passed.
	if code, a, body := e.readyz(); code != 503 || !slices.Equal(a.Failed, []string{"store"}) ||
		!strings.Contains(a.Error, "the token store did not answer a look-up within 2s") {
		t.Fatalf("store hanging: %d %s", code, body)
	}

	// It answers again: ready, without a restart.
	st.hang.Store(false)
	st.down.Store(false)
	if code, _, body := e.readyz(); code != 200 {
		t.Fatalf("store back: %d %s", code, body)
	}
	if !strings.Contains(e.logs.String(), `"msg":"ready: every readiness check passes again"`) {
		t.Errorf("no log line for ready again:\n%s", e.logs)
	}

	// A file credential that became unreadable: not ready, naming the
	// config key, not the file; the credential in force still serves.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	code, a, body := e.readyz()
	if code != 503 || !slices.Equal(a.Failed, []string{"credential"}) ||
		a.Error != "cproxy: not ready: the credential source of upstream.anthropic.credential (file) cannot be read: fix it, then send SIGHUP (the log has why; requests still get the credential loaded before)" {
		t.Fatalf("credential file removed: %d %s", code, body)
	}
	if strings.Contains(body, key) {
		t.Errorf("the answer names the credential's file: %s", body)
	}
	if !strings.Contains(e.logs.String(), "file:"+key+": no such file") {
		t.Errorf("the log does not say why:\n%s", e.logs)
	}
	if r := e.do("POST", "/v1/messages", bearer(e.token("conv-1")), hello); r.status != 200 {
		t.Errorf("a request with the credential in force = %d %s", r.status, r.body)
	}

	// Every check that fails is named.
	e.srv.SetPolicy(nil)
	st.down.Store(true)
	if code, a, body := e.readyz(); code != 503 || !slices.Equal(a.Failed, []string{"store", "policy", "credential"}) ||
		!strings.Contains(a.Error, "; no policy is loaded: fix the policy file") {
		t.Fatalf("three checks failing: %d %s", code, body)
	}

	// It takes no parameters and only GET.
	if r := e.doAt(e.admin.URL, "GET", "/readyz?verbose=1", nil, ""); r.status != 400 || !strings.Contains(r.body, `unknown parameter \"verbose\" (this endpoint takes no query parameters)`) {
		t.Errorf("GET /readyz?verbose=1 = %d %s", r.status, r.body)
	}
	if r := e.doAt(e.admin.URL, "POST", "/readyz", nil, ""); r.status != 405 || r.header.Get("Allow") != "GET" {
		t.Errorf("POST /readyz = %d %s", r.status, r.body)
	}
	// The proxy listener, which the sandboxes reach, does not answer it.
	if r := e.do("GET", "/readyz", nil, ""); r.status != 403 {
		t.Errorf("GET /readyz on the proxy listener = %d %s", r.status, r.body)
	}
}

// Each credential is named by its config key: an expired claude-code
// login with the reason routes give clients, a route's source by the name
// the route gives it (a relay names its header's).
func TestReadyzCredentialNames(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CLAUDE_CONFIG_DIR", dir)
	login := fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"expiresAt":%d}}`, canaryOAuth, time.Now().Add(-time.Hour).UnixMilli())
	if err := writeFile(filepath.Join(dir, ".credentials.json"), login); err != nil {
		t.Fatal(err)
	}
	claude, err := new(secrets.Loader).Live("anthropic", "claude-code", nil)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "mod-key")
	if err := writeFile(key, canaryKey); err != nil {
		t.Fatal(err)
	}
	mod, err := new(secrets.Loader).Live("values", secrets.Source("file:"+key), nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(key)
	e := newEnv(t, func(o *testOptions) {
		o.Anthropic.Live, o.Anthropic.Auth = claude, "oauth"
		o.Extra = []Route{valuesRoute{sources: []Source{{Name: "values.key", Live: mod}}}}
	})
	code, a, body := e.readyz()
	if code != 503 || !slices.Equal(a.Failed, []string{"credential", "credential"}) ||
		!strings.HasPrefix(a.Error, "cproxy: not ready: upstream.anthropic.credential: claude-code: Claude Code's login on the cproxy host expired (at ") ||
		!strings.HasSuffix(a.Error, "; the credential source of values.key (file) cannot be read: fix it, then send SIGHUP (the log has why; requests still get the credential loaded before)") {
		t.Fatalf("%d %s", code, body)
	}
	if strings.Contains(body, dir) {
		t.Errorf("the answer names a file: %s", body)
	}
}
