package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
)

// probeClient gives up on a probe well after cproxy should have answered
// it (routes.ReadyTimeout): a probe that hangs fails the test rather than
// the deadline.
var probeClient = &http.Client{Timeout: routes.ReadyTimeout + 10*time.Second}

// probe is one answer of GET path on s's admin listener.
type probe struct {
	status int
	body   string
	took   time.Duration
}

func getProbe(t *testing.T, s *served, path string) probe {
	t.Helper()
	start := time.Now()
	resp, err := probeClient.Get(s.admin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return probe{resp.StatusCode, string(b), time.Since(start)}
}

// waitReadyz polls GET /readyz on s until it answers want, and returns
// that answer.
func waitReadyz(t *testing.T, s *served, want int, what string) probe {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p := getProbe(t, s, "/readyz")
		if p.status == want {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: GET /readyz still answers %d %s after 60s, want %d", what, p.status, p.body, want)
		}
	}
}

// The PostgreSQL server really stopped under two running replicas, one of
// them with the look-up cache: GET /readyz turns 503, naming the store and
// without the database's address or error, while GET /healthz stays 200;
// once the server is back, /readyz is 200 again, with no restart.
func TestReadyzDatabaseRestart(t *testing.T) {
	dsn := pgTestDatabase(t)
	needPgCtl(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	replicas := []*served{startReplica(t, fake.URL), startReplicaWith(t, fake.URL, "lookup_cache = \"1m\"\n", "")}
	for _, s := range replicas {
		if p := waitReadyz(t, s, 200, "before the stop"); p.body != `{"status":"ready"}`+"\n" {
			t.Errorf("ready: %q", p.body)
		}
	}

	pgCtl(t, "-m", "fast", "stop")
	// Started in any case, so that a failure here leaves the server up for
	// the other tests.
	started := false
	restart := func() {
		if !started {
			started = true
			pgCtl(t, "-l", filepath.Join(filepath.Dir(os.Getenv("CPROXY_TEST_PG_DATA")), "server.log"), "start")
		}
	}
	defer restart()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range replicas {
		p := waitReadyz(t, s, 503, "with the database stopped")
		var a struct {
			Status string
			Failed []string
			Error  string
		}
		if err := json.Unmarshal([]byte(p.body), &a); err != nil || a.Status != "not ready" || !slices.Equal(a.Failed, []string{"store"}) ||
			!strings.HasPrefix(a.Error, "cproxy: not ready: the token store ") || !strings.Contains(a.Error, "check that its database is up and reachable from this replica") {
			t.Errorf("replica %d with the database stopped: %q", i, p.body)
		}
		if strings.Contains(p.body, u.Host) || strings.Contains(p.body, strings.TrimPrefix(u.Path, "/")) {
			t.Errorf("replica %d: the answer names the database: %s", i, p.body)
		}
		t.Logf("replica %d: /readyz answered 503 in %v", i, p.took.Round(time.Millisecond))
		if h := getProbe(t, s, "/healthz"); h.status != 200 {
			t.Errorf("replica %d: GET /healthz with the database stopped = %d %s, want 200", i, h.status, h.body)
		}
	}

	restart()
	for _, s := range replicas {
		waitReadyz(t, s, 200, "after the restart")
	}
	for _, s := range replicas {
		// Written before the answer, but read from serve's stderr by
		// another goroutine.
		waitServeLog(t, s, `level=WARN msg="not ready: GET /readyz answers 503" check=store`)
		waitServeLog(t, s, `level=INFO msg="ready: every readiness check passes again"`)
	}
}

// waitServeLog waits until s's log has a line with want.
func waitServeLog(t *testing.T, s *served, want string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(s.stderr.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve's log has no %s after 60s:\n%s", want, s.stderr.String())
		}
	}
}
