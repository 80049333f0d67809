package tokens

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func openPG(t testing.TB, dsn string) *PostgresStore {
	t.Helper()
	s, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pgExec(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// Replicas starting together apply each migration once, and reopening
// applies nothing.
func TestPostgresMigrationsConcurrentAndIdempotent(t *testing.T) {
	dsn := NewTestDatabase(t)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			s, err := OpenPostgres(ctx, dsn)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	s := openPG(t, dsn)
	var n, max int
	if err := s.pool.QueryRow(ctx, "SELECT count(*), max(version) FROM schema_version").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != PostgresSchemaVersion() || max != PostgresSchemaVersion() {
		t.Errorf("schema_version has %d rows up to %d; want %d", n, max, PostgresSchemaVersion())
	}
}

// A database at schema 1 (the first release) is upgraded in place: what
// it held stays, and what later schemas add works.
func TestPostgresUpgradesSchema1(t *testing.T) {
	dsn := NewTestDatabase(t)
	pgExec(t, dsn, "CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
	pgExec(t, dsn, knownMigrations()[0].sql)
	pgExec(t, dsn, "INSERT INTO schema_version (version) VALUES (1)")
	pgExec(t, dsn, "INSERT INTO usage VALUES ('tok_old', 3, 30, 300, 0, 0)")
	s := openPG(t, dsn)
	if u, err := s.LoadUsage(ctx, "tok_old"); err != nil || u != (Usage{Requests: 3, Input: 30, Output: 300}) {
		t.Errorf("usage kept from schema 1: %+v, %v", u, err)
	}
	if wait, err := s.TakeRate(ctx, "tok_old", 1); err != nil || wait != 0 {
		t.Errorf("TakeRate after the upgrade: %v, %v", wait, err)
	}
	var v int
	if err := s.pool.QueryRow(ctx, "SELECT max(version) FROM schema_version").Scan(&v); err != nil || v != PostgresSchemaVersion() {
		t.Errorf("schema after the upgrade: %d, %v; want %d", v, err, PostgresSchemaVersion())
	}
}

func TestPostgresRefusesNewerSchema(t *testing.T) {
	dsn := NewTestDatabase(t)
	openPG(t, dsn).Close()
	pgExec(t, dsn, "INSERT INTO schema_version (version) VALUES ($1)", PostgresSchemaVersion()+41)
	_, err := OpenPostgres(ctx, dsn)
	want := fmt.Sprintf("is at schema %d; this cproxy knows up to %d", PostgresSchemaVersion()+41, PostgresSchemaVersion())
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), want) {
		t.Errorf("OpenPostgres on a newer schema: %v; want %q", err, want)
	}
}

// An unreachable database is named by host and port; the password is
// never in the error.
func TestPostgresUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const password = "s3cret-PASSWORD-canary"
	start := time.Now()
	_, err = OpenPostgres(ctx, "postgres://cproxy:"+password+"@"+addr+"/cproxy?connect_timeout=2")
	if err == nil {
		t.Fatal("OpenPostgres on a closed port succeeded")
	}
	if !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), password) {
		t.Errorf("error = %v; want the address %s and no password", err, addr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to fail", d)
	}
	for _, dsn := range []string{"postgres://cproxy:" + password + "@[::1", "host=x password=" + password + " port=notaport"} {
		_, err := OpenPostgres(ctx, dsn)
		if err == nil || strings.Contains(err.Error(), password) {
			t.Errorf("OpenPostgres(bad DSN) = %v; want an error without the password", err)
		}
	}
}

// The database going away under a running store fails calls (never
// ErrNotFound, which would read as "unknown token"), writes nothing half,
// and the store recovers when the database comes back.
func TestPostgresDatabaseGoneLater(t *testing.T) {
	dsn := NewTestDatabase(t)
	s := openPG(t, dsn)
	h := issue(t, s, "conv-1", t0)
	u, _ := url.Parse(dsn)
	name := strings.TrimPrefix(u.Path, "/")
	admin := testPostgresDSN(t)
	pgExec(t, admin, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false")
	pgExec(t, admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)

	if _, err := s.Lookup(ctx, h); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup with the database gone: %v; want a store error", err)
	}
	if _, err := s.RevokeSandbox(ctx, "conv-1", t0); err == nil {
		t.Error("RevokeSandbox with the database gone succeeded")
	}
	if err := s.Create(ctx, newHash(t), Record{Sandbox: "conv-2", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err == nil {
		t.Error("Create with the database gone succeeded")
	}
	if _, err := listAll(ctx, s); err == nil {
		t.Error("List with the database gone succeeded")
	}

	pgExec(t, admin, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true")
	r, err := s.Lookup(ctx, h)
	if err != nil || !r.RevokedAt.IsZero() {
		t.Errorf("Lookup after the database came back: %+v, %v", r, err)
	}
	if recs, err := listAll(ctx, s); err != nil || len(recs) != 1 {
		t.Errorf("List after the database came back: %d records, %v; want the one from before", len(recs), err)
	}
}

// A revocation is announced on RevokedChannel once it commits.
func TestPostgresRevocationNotifies(t *testing.T) {
	dsn := NewTestDatabase(t)
	s := openPG(t, dsn)
	issue(t, s, "conv-1", t0)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+RevokedChannel); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeSandbox(ctx, "conv-1", t0); err != nil {
		t.Fatal(err)
	}
	n, err := conn.WaitForNotification(ctx)
	if err != nil || n.Channel != RevokedChannel || n.Payload != "conv-1" {
		t.Errorf("notification = %+v, %v", n, err)
	}
}

// The look-up cost of each store, which PostgresStore's doc comment
// weighs against a cache.
func BenchmarkStoreLookup(b *testing.B) {
	bolt, err := OpenBolt(filepath.Join(b.TempDir(), "t.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer bolt.Close()
	stores := []struct {
		name string
		s    Store
	}{{"bolt", bolt}}
	if testPostgresDSN(b) != "" {
		stores = append(stores, struct {
			name string
			s    Store
		}{"postgres", openPG(b, NewTestDatabase(b))})
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			h := issue(b, st.s, "conv-1", t0)
			for b.Loop() {
				if _, err := st.s.Lookup(ctx, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// One replica prunes at a time: while another holds the prune lock (here a
// connection standing in for a replica in the middle of a batch), Prune
// deletes nothing and says so; once it is let go, Prune deletes.
func TestPostgresPruneOneReplicaAtATime(t *testing.T) {
	dsn := NewTestDatabase(t)
	a, b := openPG(t, dsn), openPG(t, dsn)
	h := issue(t, a, "conv-1", t0)
	cutoff := t0.Add(2 * time.Hour)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pruneLock)); err != nil {
		t.Fatal(err)
	}
	if pruned, err := b.Prune(ctx, cutoff, PruneBatch); !errors.Is(err, ErrPruneBusy) || len(pruned) != 0 {
		t.Errorf("Prune while another replica prunes = %v, %v; want ErrPruneBusy", ids(pruned), err)
	}
	if _, err := a.Lookup(ctx, h); err != nil {
		t.Errorf("the token went while another replica pruned: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if pruned, err := b.Prune(ctx, cutoff, PruneBatch); err != nil || len(pruned) != 1 {
		t.Errorf("Prune after the other replica's = %v, %v; want the token", ids(pruned), err)
	}
}

// Two replicas pruning together delete each token once between them, and
// every batch either prunes or is told the other one is.
func TestPostgresPruneConcurrent(t *testing.T) {
	dsn := NewTestDatabase(t)
	stores := []*PostgresStore{openPG(t, dsn), openPG(t, dsn)}
	const n = 60
	for range n {
		issue(t, stores[0], "conv-1", t0)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for {
				pruned, err := s.Prune(ctx, t0.Add(2*time.Hour), 5)
				if errors.Is(err, ErrPruneBusy) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range pruned {
					seen[r.ID]++
				}
				mu.Unlock()
				if len(pruned) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d of %d tokens pruned", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("token %s pruned %d times", id, k)
		}
	}
}

// Prune finds its tokens and their usage through indexes, not by reading
// every row of tokens and usage for each batch.
func TestPostgresPruneUsesIndexes(t *testing.T) {
	dsn := NewTestDatabase(t)
	openPG(t, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// With sequential scans priced out, a plan still reads the whole
	// table when no index serves the condition.
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{pruneCandidates, []any{t0, PruneBatch}},
		{pruneUsage, []any{[]string{"tok_000000000000"}}},
	} {
		rows, err := conn.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") {
			t.Errorf("%s\nreads the whole table:\n%s", q.sql, plan)
		}
	}
}
