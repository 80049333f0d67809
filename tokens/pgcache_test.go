package tokens

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cproxy/cproxy/internal/testutil"
)

// openCache opens a PostgresCache with ttl on dsn, logging to the returned
// buffer, and waits for its listener.
func openCache(t *testing.T, dsn string, ttl time.Duration) (*PostgresCache, *testutil.Buffer) {
	t.Helper()
	logs := &testutil.Buffer{}
	c := NewPostgresCache(ctx, openPG(t, dsn), ttl, slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { c.Close() })
	waitListening(t, c, true)
	return c, logs
}

// waitListening waits until c's listener is up (or down), for at most 20
// seconds: reconnection backs off up to listenRetryMax.
func waitListening(t *testing.T, c *PostgresCache, up bool) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.RLock()
		listening := c.listening
		c.mu.RUnlock()
		if listening == up {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener is not %v after 20s", map[bool]string{true: "up", false: "down"}[up])
		}
	}
}

// setProfile changes a token's row behind every cache's back: no
// notification.
func setProfile(t *testing.T, c *PostgresCache, h Hash, profile string) {
	t.Helper()
	if _, err := c.pg.pool.Exec(ctx, "UPDATE tokens SET profile = $2 WHERE hash = $1", h[:], profile); err != nil {
		t.Fatal(err)
	}
}

func profileOf(t *testing.T, s Store, h Hash) string {
	t.Helper()
	r, err := s.Lookup(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	return r.Profile
}

func cacheLen(c *PostgresCache) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

func dbName(dsn string) string {
	u, _ := url.Parse(dsn)
	return strings.TrimPrefix(u.Path, "/")
}

// A found record is served from memory: a change to its row that no
// notification announces is not seen until the TTL runs out. Absent tokens
// are not cached.
func TestPostgresCacheHit(t *testing.T) {
	dsn := NewTestDatabase(t)
	const ttl = time.Second // long enough to see the cached value on a busy machine
	c, _ := openCache(t, dsn, ttl)
	h := issue(t, c, "conv-1", t0)
	if got := profileOf(t, c, h); got != "" {
		t.Fatalf("profile = %q", got)
	}
	read := time.Now()
	setProfile(t, c, h, "changed")
	if got := profileOf(t, c, h); got != "" {
		t.Errorf("profile changed behind the cache's back = %q; want the cached %q", got, "")
	}
	time.Sleep(ttl - time.Since(read))
	if got := profileOf(t, c, h); got != "changed" {
		t.Errorf("after the TTL: profile = %q; want the database's %q", got, "changed")
	}

	absent := newHash(t)
	if _, err := c.Lookup(ctx, absent); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup(absent) = %v", err)
	}
	if err := c.pg.Create(ctx, absent, Record{Sandbox: "conv-2", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, absent); err != nil {
		t.Errorf("a token created after a look-up missed it: %v (ErrNotFound must not be cached)", err)
	}
}

// A revocation through another store (another replica) reaches the cache
// through its notification; RevokeSandbox through the cache itself drops
// its entries before it returns. Only the revoked sandbox's entries go.
func TestPostgresCacheRevocationNotified(t *testing.T) {
	dsn := NewTestDatabase(t)
	c, _ := openCache(t, dsn, time.Hour)
	other := openPG(t, dsn)
	h, kept := issue(t, c, "conv-1", t0), issue(t, c, "conv-2", t0)
	for _, h := range []Hash{h, kept} {
		if _, err := c.Lookup(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	setProfile(t, c, kept, "changed") // to tell whether kept stayed cached

	if _, err := other.RevokeSandbox(ctx, "conv-1", t0); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		r, err := c.Lookup(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if !r.RevokedAt.IsZero() {
			break
		}
		if time.Since(revoked) > 2*time.Second {
			t.Fatal("the revocation through another store was not seen within 2s")
		}
	}
	t.Logf("revocation through another store seen %v after it committed", time.Since(revoked).Round(time.Microsecond))
	if got := profileOf(t, c, kept); got != "" {
		t.Errorf("another sandbox's entry was dropped too (profile %q)", got)
	}

	setProfile(t, c, kept, "changed again")
	if _, err := c.RevokeSandbox(ctx, "conv-2", t0); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Lookup(ctx, kept); err != nil || r.RevokedAt.IsZero() {
		t.Errorf("right after RevokeSandbox through the cache: %+v, %v; want revoked", r, err)
	}
}

// One token's revocation through another store reaches the cache on its
// own channel: the token's entry goes, and OnRevokeToken is told its id;
// its sandbox's other token stays cached, and OnRevoke is not called.
func TestPostgresCacheTokenRevocationNotified(t *testing.T) {
	dsn := NewTestDatabase(t)
	c, _ := openCache(t, dsn, time.Hour)
	other := openPG(t, dsn)
	told := make(chan string, 1)
	c.OnRevokeToken(func(id string) { told <- id })
	c.OnRevoke(func(sandbox string) { t.Errorf("OnRevoke(%q) for one token's revocation", sandbox) })
	h, kept := issue(t, c, "conv-1", t0), issue(t, c, "conv-1", t0)
	for _, h := range []Hash{h, kept} {
		if _, err := c.Lookup(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	setProfile(t, c, kept, "changed") // to tell whether kept stayed cached

	if _, err := other.RevokeToken(ctx, h.ID(), t0); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-told:
		if id != h.ID() {
			t.Errorf("OnRevokeToken(%q), want %q", id, h.ID())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the revocation through another store was not told within 2s")
	}
	if r, err := c.Lookup(ctx, h); err != nil || r.RevokedAt.IsZero() {
		t.Errorf("after the notification: %+v, %v; want revoked", r, err)
	}
	if got := profileOf(t, c, kept); got != "" {
		t.Errorf("the sandbox's other entry was dropped too (profile %q)", got)
	}

	// Through the cache itself: dropped before it returns.
	if _, err := c.RevokeToken(ctx, kept.ID(), t0); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Lookup(ctx, kept); err != nil || r.RevokedAt.IsZero() {
		t.Errorf("right after RevokeToken through the cache: %+v, %v; want revoked", r, err)
	}
}

// The listening connection killed: the cache is bypassed until it is back,
// stays empty while the database refuses it, and starts again empty. The
// log says so, without the password.
func TestPostgresCacheListenerDown(t *testing.T) {
	dsn := NewTestDatabase(t)
	c, logs := openCache(t, dsn, time.Hour)
	h := issue(t, c, "conv-1", t0)
	profileOf(t, c, h)
	if cacheLen(c) != 1 {
		t.Fatalf("%d entries after a look-up, want 1", cacheLen(c))
	}

	admin, name := testPostgresDSN(t), dbName(dsn)
	pgExec(t, admin, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false")
	defer pgExec(t, admin, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true")
	pgExec(t, admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2", name, listenerName)
	t.Logf("listener seen down %v after its backend was terminated", waitListening(t, c, false).Round(time.Microsecond))

	// The pool's connections still work, the listener cannot reconnect.
	for _, p := range []string{"a", "b"} {
		setProfile(t, c, h, p)
		if got := profileOf(t, c, h); got != p {
			t.Errorf("listener down: profile = %q; want the database's %q (cache bypassed)", got, p)
		}
	}
	if n := cacheLen(c); n != 0 {
		t.Errorf("listener down: %d entries cached, want none", n)
	}

	pgExec(t, admin, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true")
	t.Logf("listener back %v after the database allowed connections again", waitListening(t, c, true).Round(time.Millisecond))
	if got := profileOf(t, c, h); got != "b" {
		t.Errorf("after the listener came back: profile = %q; want %q", got, "b")
	}
	setProfile(t, c, h, "c")
	if got := profileOf(t, c, h); got != "b" {
		t.Errorf("after the listener came back the cache is not used: profile = %q", got)
	}

	out := logs.String()
	for _, want := range []string{"token store listener down", "token store listener reconnected"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	u, _ := url.Parse(dsn)
	if pw, _ := u.User.Password(); pw == "" || strings.Contains(out, pw) {
		t.Errorf("the log holds the password (or the test DSN has none):\n%s", out)
	}
}

// pausedStore holds a look-up after it read the database, until released.
type pausedStore struct {
	Store
	read, release chan struct{}
}

func (s pausedStore) Lookup(ctx context.Context, h Hash) (Record, error) {
	r, err := s.Store.Lookup(ctx, h)
	s.read <- struct{}{}
	<-s.release
	return r, err
}

// A look-up that read a live row before a revocation's notification was
// processed returns what it read, but does not cache it: the next look-up
// sees the revocation.
func TestPostgresCacheRaceWithNotification(t *testing.T) {
	dsn := NewTestDatabase(t)
	c, _ := openCache(t, dsn, time.Hour)
	h := issue(t, c, "conv-1", t0)
	paused := pausedStore{Store: c.pg, read: make(chan struct{}), release: make(chan struct{})}
	c.Store = paused

	got := make(chan Record, 1)
	go func() {
		r, err := c.Lookup(ctx, h)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	<-paused.read
	c.mu.RLock()
	gen := c.gen
	c.mu.RUnlock()
	if _, err := openPG(t, dsn).RevokeSandbox(ctx, "conv-1", t0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.RLock()
		notified := c.gen != gen
		c.mu.RUnlock()
		if notified {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no notification within 2s")
		}
	}
	close(paused.release)
	if r := <-got; !r.RevokedAt.IsZero() {
		t.Fatal("the paused look-up read the row after the revocation; the test did not race")
	}
	c.Store = c.pg
	if r, err := c.Lookup(ctx, h); err != nil || r.RevokedAt.IsZero() {
		t.Errorf("look-up after the notification: %+v, %v; want revoked (a stale row was cached)", r, err)
	}
}

// The cache holds at most limit entries; past it, it starts again empty.
func TestPostgresCacheBounded(t *testing.T) {
	dsn := NewTestDatabase(t)
	c, _ := openCache(t, dsn, time.Hour)
	c.mu.Lock()
	c.limit = 3
	c.mu.Unlock()
	for i := range 10 {
		profileOf(t, c, issue(t, c, "conv-1", t0))
		if n := cacheLen(c); n > 3 || n != i%3+1 {
			t.Fatalf("after %d look-ups: %d entries, want %d", i+1, n, i%3+1)
		}
	}
}

// Close stops the listener: its connection leaves the database.
func TestPostgresCacheClose(t *testing.T) {
	dsn := NewTestDatabase(t)
	c := NewPostgresCache(ctx, openPG(t, dsn), time.Hour, nil)
	waitListening(t, c, true)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	admin, name := testPostgresDSN(t), dbName(dsn)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the database 5s after Close", n)
		}
	}
}

// A quiet listener checks its connection every listenHeartbeat without
// breaking it: after two heartbeats it is still up, on its first
// connection, and still hears revocations.
func TestPostgresCacheHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("waits two heartbeats")
	}
	dsn := NewTestDatabase(t)
	c, logs := openCache(t, dsn, time.Hour)
	h := issue(t, c, "conv-1", t0)
	profileOf(t, c, h)
	time.Sleep(2*listenHeartbeat + 500*time.Millisecond)
	if _, err := openPG(t, dsn).RevokeSandbox(ctx, "conv-1", t0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); cacheLen(c) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a revocation after two quiet heartbeats was not heard within 2s")
		}
	}
	if out := logs.String(); out != "" {
		t.Errorf("the listener logged something while quiet:\n%s", out)
	}
}

// What PostgresCache does not override goes to the database unchanged.
func TestPostgresCacheDelegates(t *testing.T) {
	dsn := NewTestDatabase(t)
	c, _ := openCache(t, dsn, time.Hour)
	h := issue(t, c, "conv-1", t0)
	recs, err := listAll(ctx, openPG(t, dsn))
	if err != nil || len(recs) != 1 || recs[0].ID != h.ID() {
		t.Errorf("a record created through the cache, listed by another store: %+v, %v", recs, err)
	}
	if recs, err := listAll(ctx, c); err != nil || len(recs) != 1 {
		t.Errorf("List through the cache: %+v, %v", recs, err)
	}
	if !strings.Contains(c.String(), "look-up cache 1h0m0s") || strings.Contains(c.String(), "@") {
		t.Errorf("String() = %q", c.String())
	}
}
