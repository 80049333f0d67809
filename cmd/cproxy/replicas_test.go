package main

// Several `cproxy serve` replicas sharing one PostgreSQL store,
// through the real binary. They need CPROXY_TEST_PG_DSN, a PostgreSQL role
// that may create databases (.ci/run starts a server with .ci/postgres);
// without it they skip, except under CI=true, where they fail. The database
// restart test also needs CPROXY_TEST_PG_CTL and CPROXY_TEST_PG_DATA, which
// .ci/postgres sets, to stop and start that server.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/jackc/pgx/v5"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/tokens"
)

// pgTestDatabase creates an empty database for t on CPROXY_TEST_PG_DSN's
// server, dropped when t ends, and returns its DSN.
func pgTestDatabase(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("CPROXY_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but CPROXY_TEST_PG_DSN is not set: install PostgreSQL (apt-get install postgresql) and run bash .ci/test, which starts a throwaway server")
		}
		t.Skip("no PostgreSQL server (CPROXY_TEST_PG_DSN is not set): install PostgreSQL (apt-get install postgresql), and bash .ci/test starts one")
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
	return startReplicaWith(t, upstream, "", "")
}

// startReplicaWith is startReplica with more [store] keys and, unless pol
// is empty, pol as its policy file.
func startReplicaWith(t *testing.T, upstream, storeKeys, pol string) *served {
	t.Helper()
	dir := t.TempDir()
	writeServeConfig(t, dir, upstream)
	cfgPath := filepath.Join(dir, "cproxy.toml")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "[store]\npath = \"cproxy.db\"\n", "[store]\nkind = \"postgres\"\ndsn = \"env:CPROXY_PG_DSN\"\n"+storeKeys, 1)
	if pol != "" {
		cfg = "policy = \"policy.toml\"\n" + cfg
		if err := os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(pol), 0o600); err != nil {
			t.Fatal(err)
		}
	}
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

// The same with store.lookup_cache on every replica: A and B answer the
// token from memory once they have seen it, and C's revocation reaches them
// as a notification. The bound is the notification's delivery: the test
// polls A and B until they refuse, logs how long that took after C
// answered, fails past 2 s (a bound on the notification path on a busy
// machine, not a benchmark), and checks that no request succeeds after
// the first refusal.
func TestReplicasShareRevocationCached(t *testing.T) {
	dsn := pgTestDatabase(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	const cached = "lookup_cache = \"1m\"\n"
	a, b, c := startReplicaWith(t, fake.URL, cached, ""), startReplicaWith(t, fake.URL, cached, ""), startReplicaWith(t, fake.URL, cached, "")

	tok, other := a.mint("conv-shared"), b.mint("conv-other")
	for _, r := range []*served{a, b, a, b} { // the second round from the caches
		if got := status(t, r, tok); got != 200 {
			t.Fatalf("token minted on A, used through %s: %d, want 200", r.proxy, got)
		}
	}

	if n := pgListeners(t, dsn); n != 3 {
		t.Fatalf("%d revocation listeners on the database, want one per replica", n)
	}

	const bound = 2 * time.Second
	c.revoke("conv-shared")
	revoked := time.Now()
	var wg sync.WaitGroup
	for _, r := range []struct {
		name string
		s    *served
	}{{"A", a}, {"B", b}} {
		wg.Go(func() {
			client := sdkClient(r.s.proxy, option.WithAuthToken(tok))
			var refused time.Duration
			requests := 0
			for refused == 0 || requests < 20 {
				_, err := client.Messages.New(t.Context(), helloParams())
				requests++
				var apiErr *anthropic.Error
				switch {
				case err == nil && refused != 0:
					t.Errorf("%s: a request succeeded after the token was first refused", r.name)
					return
				case err == nil && time.Since(revoked) > bound:
					t.Errorf("%s: still served %v after the revocation through C answered, want refused within %v", r.name, time.Since(revoked), bound)
					return
				case err == nil:
				case errors.As(err, &apiErr) && apiErr.StatusCode == 401:
					if refused == 0 {
						refused = time.Since(revoked)
						t.Logf("revocation through C in force on %s (cached): refused %v after C answered, at request %d", r.name, refused.Round(time.Microsecond), requests)
					}
				default:
					t.Errorf("%s: %v", r.name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := status(t, a, other); got != 200 {
		t.Errorf("another sandbox's token after the revocation: %d, want 200", got)
	}
	for _, r := range []*served{a, b, c} {
		if !strings.Contains(r.stderr.String(), "look-up cache 1m0s") {
			t.Errorf("a replica does not log its look-up cache:\n%s", r.stderr.String())
		}
	}
	checkUpstreamGotCredential(t, fake)
	checkNoPassword(t, dsn, a, b, c)
}

// One token revoked by its id through C (DELETE /tokens/ID), on replicas
// without and with the look-up cache: that token is refused on A and B
// (at once without the cache, within the notification's delivery with
// it), and its sandbox's other token, cached too, still works there.
func TestReplicasShareTokenRevocation(t *testing.T) {
	for _, mode := range []struct{ name, storeKeys string }{{"no cache", ""}, {"cache", "lookup_cache = \"1m\"\n"}} {
		storeKeys := mode.storeKeys
		t.Run(mode.name, func(t *testing.T) {
			dsn := pgTestDatabase(t)
			t.Setenv("CPROXY_PG_DSN", dsn)
			fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
			t.Cleanup(fake.Close)
			a, b, c := startReplicaWith(t, fake.URL, storeKeys, ""), startReplicaWith(t, fake.URL, storeKeys, ""), startReplicaWith(t, fake.URL, storeKeys, "")
			leaked, sibling := a.mint("conv-shared"), a.mint("conv-shared")
			for _, r := range []*served{a, b, a, b} { // the second round from the caches, if any
				for _, tok := range []string{leaked, sibling} {
					if got := status(t, r, tok); got != 200 {
						t.Fatalf("token minted on A, used through %s: %d, want 200", r.proxy, got)
					}
				}
			}
			c.revokeToken(leaked)
			revoked := time.Now()
			for _, r := range []*served{a, b} {
				for status(t, r, leaked) != 401 {
					if storeKeys == "" || time.Since(revoked) > 2*time.Second {
						t.Fatalf("the revoked token still served through %s %v after C answered", r.proxy, time.Since(revoked))
					}
				}
				if got := status(t, r, sibling); got != 200 {
					t.Errorf("the sandbox's other token through %s: %d, want 200", r.proxy, got)
				}
			}
			t.Logf("revoked on A and B %v after C answered", time.Since(revoked).Round(time.Microsecond))
			checkNoPassword(t, dsn, a, b, c)
		})
	}
}

// pgListeners counts the replicas' revocation listeners on dsn's database.
func pgListeners(t *testing.T, dsn string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), os.Getenv("CPROXY_TEST_PG_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	u, _ := url.Parse(dsn)
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'cproxy revocation listener'",
		strings.TrimPrefix(u.Path, "/")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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

// A replica killed mid-stream: the client of its open stream sees the stream
// break, not end, and the other replicas go on serving the same token and
// sharing revocations.
func TestReplicaKilledMidStream(t *testing.T) {
	dsn := pgTestDatabase(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	a, b, c := startReplica(t, fake.URL), startReplica(t, fake.URL), startReplica(t, fake.URL)
	tok := a.mint("conv-1")

	gate := fake.StallStreams(3)
	defer gate.Release()
	type result struct {
		events int
		err    error
	}
	got, first := make(chan result, 1), make(chan struct{})
	go func() {
		stream := sdkClient(a.proxy, option.WithAuthToken(tok)).Messages.NewStreaming(t.Context(), helloParams())
		defer stream.Close()
		events := 0
		for stream.Next() {
			if events++; events == 1 {
				close(first)
			}
		}
		got <- result{events, stream.Err()}
	}()
	// Mid-way: the client holds the first events and the upstream is
	// stalled before the rest.
	<-gate.Reached()
	select {
	case <-first:
	case r := <-got:
		t.Fatalf("the stream through A ended before its first event: %v", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no event reached the client through A")
	}
	a.cmd.Process.Kill()
	a.done <- <-a.done // for the cleanup, which waits on it too

	select {
	case r := <-got:
		if r.err == nil || r.events >= 6 {
			t.Errorf("the stream through the killed replica ended cleanly after %d events (%v), want an error mid-way", r.events, r.err)
		}
		t.Logf("client of the killed replica's stream: %d events, then %v", r.events, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stream through the killed replica did not end")
	}
	gate.Release()

	for _, r := range []struct {
		name string
		s    *served
	}{{"B", b}, {"C", c}} {
		if got := status(t, r.s, tok); got != 200 {
			t.Errorf("token minted on the killed A, used through %s: %d, want 200", r.name, got)
		}
	}
	stream := sdkClient(b.proxy, option.WithAuthToken(tok)).Messages.NewStreaming(t.Context(), helloParams())
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Errorf("a stream through B after A was killed: %v", err)
	}
	stream.Close()

	b.revoke("conv-1")
	for _, r := range []struct {
		name string
		s    *served
	}{{"B", b}, {"C", c}} {
		if got := status(t, r.s, tok); got != 401 {
			t.Errorf("after the revocation through B, on %s: %d, want 401", r.name, got)
		}
	}
	checkUpstreamGotCredential(t, fake)
	checkNoPassword(t, dsn, a, b, c)
}

// pgCtl runs pg_ctl on the server .ci/postgres started (CPROXY_TEST_PG_CTL,
// CPROXY_TEST_PG_DATA), as CPROXY_TEST_PG_USER when that is set.
// needPgCtl skips a test that stops and starts the PostgreSQL server when
// .ci/postgres did not say how (fails under CI).
func needPgCtl(t *testing.T) {
	t.Helper()
	if os.Getenv("CPROXY_TEST_PG_CTL") == "" || os.Getenv("CPROXY_TEST_PG_DATA") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but CPROXY_TEST_PG_CTL or CPROXY_TEST_PG_DATA is not set: install PostgreSQL (apt-get install postgresql) and run bash .ci/test, which starts a throwaway server")
		}
		t.Skip("CPROXY_TEST_PG_CTL is not set: the test cannot restart the PostgreSQL server")
	}
}

func pgCtl(t *testing.T, args ...string) {
	t.Helper()
	data := os.Getenv("CPROXY_TEST_PG_DATA")
	argv := append([]string{os.Getenv("CPROXY_TEST_PG_CTL"), "-D", data, "-w", "-t", "60"}, args...)
	if u := os.Getenv("CPROXY_TEST_PG_USER"); u != "" {
		argv = append([]string{"runuser", "-u", u, "--"}, argv...)
	}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// outcome is one model request's result in TestReplicaDatabaseRestart's load.
type outcome struct {
	replica    string
	start, end time.Time
	status     int // 0 when the request failed without an HTTP answer
	err        error
}

// The PostgreSQL server really stopped and started again while two replicas
// serve a loop of requests: while it is down every request is refused with
// 503 in the model route's format, and once it is back they succeed again
// without restarting cproxy, and a revocation holds on both.
func TestReplicaDatabaseRestart(t *testing.T) {
	dsn := pgTestDatabase(t)
	needPgCtl(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	a, b := startReplica(t, fake.URL), startReplica(t, fake.URL)
	tok := a.mint("conv-1")
	replicas := []struct {
		name string
		s    *served
	}{{"A", a}, {"B", b}}

	// The load: one client per replica, request after request, until stop.
	var (
		mu       sync.Mutex
		outcomes []outcome
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := sdkClient(r.s.proxy, option.WithAuthToken(tok))
			for {
				select {
				case <-stop:
					return
				default:
				}
				o := outcome{replica: r.name, start: time.Now()}
				_, err := client.Messages.New(context.Background(), helloParams())
				o.end = time.Now()
				var apiErr *anthropic.Error
				switch {
				case err == nil:
					o.status = 200
				case errors.As(err, &apiErr):
					o.status = apiErr.StatusCode
					if o.status != 503 || !strings.Contains(apiErr.Error(), "token store unavailable") {
						o.err = err
					}
				default:
					o.err = err
				}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	// seen waits until every replica has answered a request that started
	// after since with want.
	seen := func(since time.Time, want int, what string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got := map[string]bool{}
			mu.Lock()
			for _, o := range outcomes {
				if o.start.After(since) && o.status == want {
					got[o.replica] = true
				}
			}
			mu.Unlock()
			if len(got) == len(replicas) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not every replica answered %d within 60s", what, want)
			}
		}
	}

	seen(time.Time{}, 200, "before the restart")
	pgCtl(t, "-m", "fast", "stop")
	stopped := time.Now()
	// Started in any case, so that a failure here leaves the server up for
	// the other tests. The outage is from stopped (pg_ctl stop returned) to
	// starting (pg_ctl start run): the server may accept connections before
	// pg_ctl start sees it and returns, at started.
	var starting, started time.Time
	restart := func() {
		if started.IsZero() {
			starting = time.Now()
			pgCtl(t, "-l", filepath.Join(filepath.Dir(os.Getenv("CPROXY_TEST_PG_DATA")), "server.log"), "start")
			started = time.Now()
		}
	}
	defer restart()
	seen(stopped, 503, "with the database stopped")
	// Let the outage last beyond the first refusals, so that reconnection
	// attempts are refused too.
	mu.Lock()
	n := len(outcomes)
	mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		more := len(outcomes) - n
		mu.Unlock()
		if more >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the load stalled with the database down")
		}
	}
	restart()
	seen(started, 200, "after the restart")
	stopLoad()

	// Every answer is 200 or the model route's 503; while the server was
	// down (requests wholly inside the outage), 503 only.
	recovered := map[string]time.Time{}
	counts := map[string]map[int]int{}
	for _, o := range outcomes {
		if o.err != nil {
			t.Errorf("%s: request at %v: %v", o.replica, o.start.Sub(stopped).Round(time.Millisecond), o.err)
			continue
		}
		if o.start.After(stopped) && o.end.Before(starting) {
			if counts[o.replica] == nil {
				counts[o.replica] = map[int]int{}
			}
			counts[o.replica][o.status]++
			if o.status != 503 {
				t.Errorf("%s: request with the database down answered %d, want 503", o.replica, o.status)
			}
		}
		if o.start.After(started) && o.status == 200 {
			if _, ok := recovered[o.replica]; !ok {
				recovered[o.replica] = o.end
			}
		}
	}
	for _, r := range replicas {
		failedAfter := 0
		for _, o := range outcomes {
			if o.replica == r.name && o.start.After(started) && o.end.Before(recovered[r.name]) {
				failedAfter++
			}
		}
		t.Logf("%s: database down %v, answers %v; pg_ctl start took %v, then %d refused request(s), then 200 %v after it returned",
			r.name, starting.Sub(stopped).Round(time.Millisecond), counts[r.name], started.Sub(starting).Round(time.Millisecond),
			failedAfter, recovered[r.name].Sub(started).Round(time.Millisecond))
		if failedAfter > 10 {
			t.Errorf("%s: %d requests failed after the database was back, want a few at most", r.name, failedAfter)
		}
	}

	a.revoke("conv-1")
	for _, r := range replicas {
		if got := status(t, r.s, tok); got != 401 {
			t.Errorf("after the database restart, revoked through A, on %s: %d, want 401", r.name, got)
		}
	}
	for _, r := range replicas {
		if !strings.Contains(r.s.stderr.String(), "token store look-up failed") {
			t.Errorf("%s: no log line for the failed look-ups:\n%s", r.name, r.s.stderr.String())
		}
	}
	checkNoPassword(t, dsn, a, b)
}

// Prune through one replica deletes a dead token minted and spent through
// another, with its usage and rate rows in the database, and leaves a live
// token's alone; the dead token stays refused.
func TestReplicasPrune(t *testing.T) {
	dsn := pgTestDatabase(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	pol := "[profile.default]\nmodels = [\"claude-*\"]\nbudget = { requests = 10, requests_per_minute = 100 }\n"
	a, b := startReplicaWith(t, fake.URL, "", pol), startReplicaWith(t, fake.URL, "", pol)
	old, live := a.mint("conv-old"), a.mint("conv-live")
	for _, tok := range []string{old, live} {
		if got := status(t, b, tok); got != 200 {
			t.Fatalf("a model request through B: %d", got)
		}
	}
	a.revoke("conv-old")

	rows := func(tok string) int {
		t.Helper()
		parsed, err := tokens.Parse(tok)
		if err != nil {
			t.Fatal(err)
		}
		id := parsed.Hash().ID()
		conn, err := pgx.Connect(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM tokens WHERE id = $1)
			+ (SELECT count(*) FROM usage WHERE split_part(key, '/', 1) = $1) + (SELECT count(*) FROM rates WHERE key = $1)`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if rows(old) != 3 || rows(live) != 3 {
		t.Fatalf("rows before the prune: %d and %d; want a token, a usage and a rate row each", rows(old), rows(live))
	}
	resp, err := http.Post(b.admin+"/tokens/prune?older_than=0s", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out client.Pruned
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Count != 1 {
		t.Fatalf("prune through B: %s %+v %v; want 1 pruned", resp.Status, out, err)
	}
	resp.Body.Close()
	if n := rows(old); n != 0 {
		t.Errorf("%d rows of the pruned token are left", n)
	}
	if n := rows(live); n != 3 {
		t.Errorf("the live token has %d rows; want its 3", n)
	}
	if got := status(t, a, old); got != 401 {
		t.Errorf("the pruned token through A: %d, want 401", got)
	}
	if got := status(t, a, live); got != 200 {
		t.Errorf("the live token through A: %d, want 200", got)
	}
	checkNoPassword(t, dsn, a, b)
}
