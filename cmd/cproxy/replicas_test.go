package main

// Several `cproxy serve` replicas sharing one PostgreSQL store (issue 9),
// through the real binary. They need CPROXY_TEST_PG_DSN, a PostgreSQL role
// that may create databases (.ci/run starts a server with .ci/postgres);
// without it they skip, except under CI=true, where they fail.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/jackc/pgx/v5"

	"github.com/cproxy/cproxy/internal/fakes"
)

// pgTestDatabase creates an empty database for t on CPROXY_TEST_PG_DSN's
// server, dropped when t ends, and returns its DSN.
func pgTestDatabase(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("CPROXY_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but CPROXY_TEST_PG_DSN is not set: run the tests through .ci/postgres (as .ci/run does)")
		}
		t.Skip("CPROXY_TEST_PG_DSN is not set")
	}
	var id [6]byte
	rand.Read(id[:])
	name := fmt.Sprintf("cproxy_test_%x", id)
	pgAdmin(t, "CREATE DATABASE "+name)
	t.Cleanup(func() { pgAdmin(t, "DROP DATABASE "+name+" WITH (FORCE)") })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("CPROXY_TEST_PG_DSN must be a postgres:// URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// pgAdmin runs one statement as CPROXY_TEST_PG_DSN's role.
func pgAdmin(t *testing.T, sql string, args ...any) {
	t.Helper()
	// Not t.Context(): cleanups run after it is cancelled.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("CPROXY_TEST_PG_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// startReplica starts `cproxy serve` in a new directory on the PostgreSQL
// database dsn, in front of upstream.
func startReplica(t *testing.T, upstream string) *served {
	t.Helper()
	dir := t.TempDir()
	writeServeConfig(t, dir, upstream)
	cfgPath := filepath.Join(dir, "cproxy.toml")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "[store]\npath = \"cproxy.db\"\n", "[store]\nkind = \"postgres\"\ndsn = \"env:CPROXY_PG_DSN\"\n", 1)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServe(t, dir)
}

// status is the HTTP status of a model request with tok through s, or 200.
func status(t *testing.T, s *served, tok string) int {
	t.Helper()
	_, err := sdkClient(s.proxy, option.WithAuthToken(tok)).Messages.New(t.Context(), helloParams())
	var apiErr *anthropic.Error
	switch {
	case err == nil:
		return 200
	case errors.As(err, &apiErr):
		return apiErr.StatusCode
	}
	t.Fatal(err)
	return 0
}

func checkNoPassword(t *testing.T, dsn string, replicas ...*served) {
	u, _ := url.Parse(dsn)
	pw, _ := u.User.Password()
	for _, r := range replicas {
		if logs := r.stderr.String(); pw == "" || strings.Contains(logs, pw) {
			t.Errorf("a replica's log holds the database password:\n%s", logs)
		}
	}
}

// Mint through A, use through B, revoke through C: the next request on A
// and on B is refused. PostgresStore does not cache look-ups, so the bound
// is "the next request": the test asserts exactly that, and logs how long
// after the revocation answered the refusals were seen.
func TestReplicasShareRevocation(t *testing.T) {
	dsn := pgTestDatabase(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	a, b, c := startReplica(t, fake.URL), startReplica(t, fake.URL), startReplica(t, fake.URL)

	tok, other := a.mint("conv-shared"), b.mint("conv-other")
	for _, r := range []*served{a, b, c} {
		if got := status(t, r, tok); got != 200 {
			t.Fatalf("token minted on A, used through %s: %d, want 200", r.proxy, got)
		}
	}

	c.revoke("conv-shared")
	revoked := time.Now()
	for _, r := range []struct {
		name string
		s    *served
	}{{"A", a}, {"B", b}} {
		if got := status(t, r.s, tok); got != 401 {
			t.Errorf("first request on %s after the revocation through C: %d, want 401", r.name, got)
		}
		t.Logf("revocation through C in force on %s: first request after it refused, %v after C answered", r.name, time.Since(revoked).Round(time.Microsecond))
	}
	if got := status(t, a, other); got != 200 {
		t.Errorf("another sandbox's token after the revocation: %d, want 200", got)
	}
	checkUpstreamGotCredential(t, fake)
	checkNoPassword(t, dsn, a, b, c)
}

// The database going away while replicas run: look-ups fail closed with
// 503 in the route's format, admin calls answer 503, nothing is written,
// and service resumes when the database is back.
func TestReplicaDatabaseDown(t *testing.T) {
	dsn := pgTestDatabase(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	a := startReplica(t, fake.URL)
	tok := a.mint("conv-1")
	if got := status(t, a, tok); got != 200 {
		t.Fatalf("before: %d", got)
	}

	u, _ := url.Parse(dsn)
	name := strings.TrimPrefix(u.Path, "/")
	pgAdmin(t, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false")
	pgAdmin(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)

	if got := status(t, a, tok); got != 503 {
		t.Errorf("model request with the database down: %d, want 503", got)
	}
	for _, req := range []struct{ method, path string }{{"POST", "/tokens?sandbox=conv-2"}, {"DELETE", "/tokens?sandbox=conv-1"}, {"GET", "/tokens"}} {
		r, _ := http.NewRequest(req.method, a.admin+req.path, nil)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Errorf("%s %s with the database down: %s, want 503", req.method, req.path, resp.Status)
		}
	}

	pgAdmin(t, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true")
	if got := status(t, a, tok); got != 200 {
		t.Errorf("after the database came back: %d, want 200 (the refused DELETE must not have revoked)", got)
	}
	if !strings.Contains(a.stderr.String(), "token store look-up failed") {
		t.Errorf("no log line for the failed look-up:\n%s", a.stderr.String())
	}
	checkNoPassword(t, dsn, a)
}
