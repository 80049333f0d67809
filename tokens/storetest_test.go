package tokens

// The Store contract: one suite that every implementation passes, the
// embedded store always and PostgreSQL when CPROXY_TEST_PG_DSN names a
// server (under CI=true it must). The SharedLimits contract, which only a
// store shared by replicas implements, is in sharedlimits_test.go.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// storeKind opens a new, empty store for a test, and reopen closes a store
// and opens the same data again.
type storeKind struct {
	name string
	open func(t *testing.T) (s Store, reopen func(Store) Store)
}

func storeKinds(t *testing.T) []storeKind {
	kinds := []storeKind{{"bolt", func(t *testing.T) (Store, func(Store) Store) {
		path := filepath.Join(t.TempDir(), "tokens.db")
		open := func() Store {
			s, err := OpenBolt(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return open(), func(s Store) Store { s.Close(); return open() }
	}}}
	if testPostgresDSN(t) != "" {
		kinds = append(kinds, storeKind{"postgres", func(t *testing.T) (Store, func(Store) Store) {
			return openTestPostgres(t)
		}}, storeKind{"postgres+cache", func(t *testing.T) (Store, func(Store) Store) {
			dsn := NewTestDatabase(t)
			open := func() Store {
				s, err := OpenPostgres(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				c := NewPostgresCache(ctx, s, time.Hour, nil)
				t.Cleanup(func() { c.Close() })
				return c
			}
			return open(), func(s Store) Store { s.Close(); return open() }
		}})
	}
	return kinds
}

// openTestPostgres opens a PostgresStore on a new, empty database, and
// returns with it a reopen that closes a store and opens the same database
// again.
func openTestPostgres(t *testing.T) (*PostgresStore, func(Store) Store) {
	dsn := NewTestDatabase(t)
	open := func() *PostgresStore {
		s, err := OpenPostgres(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(), func(s Store) Store { s.Close(); return open() }
}

// testPostgresDSN is CPROXY_TEST_PG_DSN: a PostgreSQL role that may create
// databases. Without it the PostgreSQL tests skip, except under CI=true,
// where .ci/run provides one and its absence is a failure.
func testPostgresDSN(t testing.TB) string {
	dsn := os.Getenv("CPROXY_TEST_PG_DSN")
	if dsn == "" && os.Getenv("CI") == "true" {
		t.Fatal("CI=true but CPROXY_TEST_PG_DSN is not set: install PostgreSQL (apt-get install postgresql) and run bash .ci/test, which starts a throwaway server")
	}
	return dsn
}

// NewTestDatabase creates an empty database on CPROXY_TEST_PG_DSN's server
// for t, dropped when t ends, and returns its DSN.
func NewTestDatabase(t testing.TB) string {
	t.Helper()
	dsn := testPostgresDSN(t)
	if dsn == "" {
		t.Skip("no PostgreSQL server (CPROXY_TEST_PG_DSN is not set): install PostgreSQL (apt-get install postgresql), and bash .ci/test starts one")
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("CPROXY_TEST_PG_DSN: %v", err)
	}
	defer conn.Close(ctx)
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cproxy_test_%x", id)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("CPROXY_TEST_PG_DSN must be a postgres:// URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// eachStore runs test once per store kind.
func eachStore(t *testing.T, test func(t *testing.T, s Store, reopen func(Store) Store)) {
	for _, k := range storeKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			s, reopen := k.open(t)
			test(t, s, reopen)
		})
	}
}

func newHash(t testing.TB) Hash {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return tok.Hash()
}

func sameJSON(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func checkRecord(t *testing.T, got, want Record) {
	t.Helper()
	if got.ID != want.ID || got.Sandbox != want.Sandbox || got.Profile != want.Profile || got.Source != want.Source ||
		got.Bind != want.Bind || !got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		!got.RevokedAt.Equal(want.RevokedAt) || !bytes.Equal(got.Values, want.Values) || !sameJSON(got.Budget, want.Budget) {
		t.Errorf("record = %+v\nwant %+v", got, want)
	}
	for _, tm := range []time.Time{got.CreatedAt, got.ExpiresAt, got.RevokedAt} {
		if tm.Location() != time.UTC {
			t.Errorf("time %v not in UTC", tm)
		}
	}
}

func TestStoreCreateLookup(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		local := time.FixedZone("somewhere", 5*3600)
		h := newHash(t)
		in := Record{ID: "ignored", Sandbox: "conv-1", Profile: "reviewer", Source: "10.20.0.0/16", Bind: "socket",
			CreatedAt: t0.In(local), ExpiresAt: t0.Add(time.Hour).In(local),
			Values: []byte{0, 1, 2, 0xff}, Budget: json.RawMessage(`{"requests": 10, "window": "day"}`)}
		if err := s.Create(ctx, h, in); err != nil {
			t.Fatal(err)
		}
		want := in
		want.ID = h.ID()
		got, err := s.Lookup(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		checkRecord(t, got, want)
		if err := got.Check(t0.Add(time.Minute)); err != nil {
			t.Errorf("Check of a fresh record: %v", err)
		}

		// A record without the optional fields reads back without them.
		h2 := newHash(t)
		if err := s.Create(ctx, h2, Record{Sandbox: "conv-2", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		got, err = s.Lookup(ctx, h2)
		if err != nil {
			t.Fatal(err)
		}
		checkRecord(t, got, Record{ID: h2.ID(), Sandbox: "conv-2", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
		if got.Values != nil || got.Budget != nil {
			t.Errorf("empty values and budget read back as %q, %q; want nil", got.Values, got.Budget)
		}

		// A zero ExpiresAt is kept: such a token never worked.
		h3 := newHash(t)
		if err := s.Create(ctx, h3, Record{Sandbox: "conv-3", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Lookup(ctx, h3); err != nil || !errors.Is(got.Check(t0), ErrExpired) {
			t.Errorf("token without expiry: %+v, %v; want one that Check calls expired", got, err)
		}
	})
}

func TestStoreErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		if _, err := s.Lookup(ctx, newHash(t)); !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup of an unknown token: %v, want ErrNotFound", err)
		}
		h := newHash(t)
		if err := s.Create(ctx, h, Record{Sandbox: "conv-1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, h, Record{Sandbox: "conv-2", CreatedAt: t0, ExpiresAt: t0.Add(2 * time.Hour)}); err == nil {
			t.Error("a second Create of one hash succeeded")
		}
		if got, err := s.Lookup(ctx, h); err != nil || got.Sandbox != "conv-1" {
			t.Errorf("after a refused duplicate: %+v, %v; want the first record", got, err)
		}
		for _, bad := range []string{"", "a/b", "a\x00b", "-x", string(make([]byte, 100))} {
			if err := s.Create(ctx, newHash(t), Record{Sandbox: bad, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err == nil {
				t.Errorf("Create with sandbox %q succeeded", bad)
			}
			if _, err := s.RevokeSandbox(ctx, bad, t0); err == nil {
				t.Errorf("RevokeSandbox(%q) succeeded", bad)
			}
		}
		if _, err := s.RevokeSandbox(ctx, "conv-1", time.Time{}); err == nil {
			t.Error("RevokeSandbox with a zero time succeeded")
		}
		if recs, err := listAll(ctx, s); err != nil || len(recs) != 1 {
			t.Errorf("List after refused calls: %d records, %v; want 1", len(recs), err)
		}

		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Lookup(done, h); !errors.Is(err, context.Canceled) {
			t.Errorf("Lookup with a cancelled context: %v", err)
		}
		if err := s.Create(done, newHash(t), Record{Sandbox: "conv-1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err == nil {
			t.Error("Create with a cancelled context succeeded")
		}
		if _, err := s.RevokeSandbox(done, "conv-1", t0); err == nil {
			t.Error("RevokeSandbox with a cancelled context succeeded")
		}
		if got, _ := s.Lookup(ctx, h); !got.RevokedAt.IsZero() {
			t.Error("a cancelled RevokeSandbox revoked")
		}
	})
}

func TestStoreRevokeSandbox(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		a1, a2 := issue(t, s, "conv-a", t0), issue(t, s, "conv-a", t0.Add(time.Second))
		b := issue(t, s, "conv-b", t0)
		// Looked up before the revocation (a cached store has it in memory now).
		for _, h := range []Hash{a1, a2, b} {
			if _, err := s.Lookup(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		at := t0.Add(time.Minute)
		if n, err := s.RevokeSandbox(ctx, "conv-a", at); err != nil || n != 2 {
			t.Fatalf("RevokeSandbox = %d, %v; want 2", n, err)
		}
		for _, h := range []Hash{a1, a2} {
			r, err := s.Lookup(ctx, h)
			if err != nil || !r.RevokedAt.Equal(at) || !errors.Is(r.Check(t0), ErrRevoked) {
				t.Errorf("revoked token: %+v, %v", r, err)
			}
		}
		if r, err := s.Lookup(ctx, b); err != nil || !r.RevokedAt.IsZero() {
			t.Errorf("other sandbox's token: %+v, %v; want live", r, err)
		}
		// Revoking again marks nothing and keeps the first time.
		if n, err := s.RevokeSandbox(ctx, "conv-a", at.Add(time.Hour)); err != nil || n != 0 {
			t.Errorf("second RevokeSandbox = %d, %v; want 0", n, err)
		}
		if r, _ := s.Lookup(ctx, a1); !r.RevokedAt.Equal(at) {
			t.Errorf("second revocation moved RevokedAt to %v", r.RevokedAt)
		}
		if n, err := s.RevokeSandbox(ctx, "conv-none", at); err != nil || n != 0 {
			t.Errorf("RevokeSandbox of an unknown sandbox = %d, %v", n, err)
		}
		// A sandbox whose id is a prefix of another's is its own.
		c, cc := issue(t, s, "conv-c", t0), issue(t, s, "conv-cc", t0)
		if n, err := s.RevokeSandbox(ctx, "conv-c", at); err != nil || n != 1 {
			t.Errorf("RevokeSandbox(conv-c) = %d, %v; want 1", n, err)
		}
		if r, _ := s.Lookup(ctx, c); r.RevokedAt.IsZero() {
			t.Error("conv-c not revoked")
		}
		if r, _ := s.Lookup(ctx, cc); !r.RevokedAt.IsZero() {
			t.Error("revoking conv-c revoked conv-cc")
		}
	})
}

// RevokeToken revokes the one token, durably, at once even in a store that
// caches its look-ups, and leaves the sandbox's other tokens live; again,
// it keeps the first time; an id no token has is ErrNotFound.
func TestStoreRevokeToken(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, reopen func(Store) Store) {
		leaked, sibling := issue(t, s, "conv-a", t0), issue(t, s, "conv-a", t0)
		for _, h := range []Hash{leaked, sibling} {
			if _, err := s.Lookup(ctx, h); err != nil { // a cached store has them in memory now
				t.Fatal(err)
			}
		}
		at := t0.Add(time.Minute)
		recs, err := s.RevokeToken(ctx, leaked.ID(), at)
		if err != nil || len(recs) != 1 || recs[0].ID != leaked.ID() || recs[0].Sandbox != "conv-a" || !recs[0].RevokedAt.Equal(at) {
			t.Fatalf("RevokeToken = %+v, %v; want the one record, revoked at %v", recs, err, at)
		}
		if r, err := s.Lookup(ctx, leaked); err != nil || !errors.Is(r.Check(t0), ErrRevoked) {
			t.Errorf("revoked token: %+v, %v; want revoked", r, err)
		}
		if r, err := s.Lookup(ctx, sibling); err != nil || r.Check(t0) != nil {
			t.Errorf("the sandbox's other token: %+v, %v; want live", r, err)
		}
		// Again: the same record, with the first time.
		recs, err = s.RevokeToken(ctx, leaked.ID(), at.Add(time.Hour))
		if err != nil || len(recs) != 1 || !recs[0].RevokedAt.Equal(at) {
			t.Errorf("second RevokeToken = %+v, %v; want the record revoked at %v", recs, err, at)
		}
		if _, err := s.RevokeToken(ctx, "tok_000000000000", at); !errors.Is(err, ErrNotFound) {
			t.Errorf("RevokeToken of an id no token has: %v, want ErrNotFound", err)
		}
		for _, id := range []string{"", "tok_", "tok_0FAA47DD634B", "tok_0faa47dd634", "0faa47dd634b", "tok_0faa47dd634bb"} {
			if _, err := s.RevokeToken(ctx, id, at); err == nil || errors.Is(err, ErrNotFound) {
				t.Errorf("RevokeToken(%q) = %v; want it refused as no id", id, err)
			}
		}
		if _, err := s.RevokeToken(ctx, sibling.ID(), time.Time{}); err == nil {
			t.Error("RevokeToken accepted a zero time, which would revoke nothing")
		}
		// Durable: the store opened again holds it.
		s = reopen(s)
		if r, err := s.Lookup(ctx, leaked); err != nil || !r.RevokedAt.Equal(at) {
			t.Errorf("after reopening, revoked token: %+v, %v", r, err)
		}
		if r, err := s.Lookup(ctx, sibling); err != nil || !r.RevokedAt.IsZero() {
			t.Errorf("after reopening, the other token: %+v, %v; want live", r, err)
		}
	})
}

// Tokens whose IDs are one are revoked together: an id names them both.
func TestStoreRevokeTokenSharedID(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		a, b, other := Hash{0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 1}, Hash{0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 2}, Hash{0x10, 0x20, 0x30, 0x40, 0x50, 0x61}
		for _, h := range []Hash{a, b, other} {
			if err := s.Create(ctx, h, Record{Sandbox: "conv-1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := s.RevokeToken(ctx, a.ID(), t0)
		if err != nil || len(recs) != 2 {
			t.Fatalf("RevokeToken = %+v, %v; want both tokens of the id", recs, err)
		}
		if r, _ := s.Lookup(ctx, other); !r.RevokedAt.IsZero() {
			t.Error("RevokeToken revoked a token of the next id")
		}
	})
}

// listAll walks every record of s.
func listAll(ctx context.Context, s Store) ([]Record, error) {
	var recs []Record
	err := Walk(ctx, s, ListQuery{}, func(r Record) error { recs = append(recs, r); return nil })
	return recs, err
}

// walkPages lists every page of q from its start, and fails the test at a
// page over its limit or a listing whose IDs are not in increasing order.
// between runs after each page but the last.
func walkPages(t *testing.T, s Store, q ListQuery, between func()) []Record {
	t.Helper()
	var recs []Record
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("more than 1000 pages: the walk does not end")
		}
		p, err := s.List(ctx, q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		if len(p.Records) > q.Limit {
			t.Errorf("page of %d records, limit %d", len(p.Records), q.Limit)
		}
		if p.Next != "" && (len(p.Records) == 0 || p.Next != p.Records[len(p.Records)-1].ID) {
			t.Errorf("page of %d records ends at %q", len(p.Records), p.Next)
		}
		recs = append(recs, p.Records...)
		if p.Next == "" {
			break
		}
		if between != nil {
			between()
		}
		q.After = p.Next
	}
	for i := 1; i < len(recs); i++ {
		if recs[i-1].ID >= recs[i].ID {
			t.Errorf("listing out of order at %d: %s, then %s", i, recs[i-1].ID, recs[i].ID)
		}
	}
	return recs
}

// listedIDs are the IDs of recs, in their order.
func listedIDs(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func TestStoreListPages(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		if p, err := s.List(ctx, ListQuery{Limit: 10}); err != nil || len(p.Records) != 0 || p.Next != "" {
			t.Fatalf("List of an empty store: %+v, %v", p, err)
		}
		var want []string
		for i := range 23 {
			want = append(want, issue(t, s, fmt.Sprintf("conv-%d", i%3), t0.Add(time.Duration(i)*time.Second)).ID())
		}
		slices.Sort(want)
		for _, limit := range []int{1, 5, 22, 23, 24, 1000} {
			if got := listedIDs(walkPages(t, s, ListQuery{Limit: limit}, nil)); !slices.Equal(got, want) {
				t.Errorf("pages of %d: %v\nwant %v", limit, got, want)
			}
		}
		// A full last page says there is no next one.
		if p, err := s.List(ctx, ListQuery{Limit: 23}); err != nil || len(p.Records) != 23 || p.Next != "" {
			t.Errorf("one page of all 23: %d records, next %q, %v", len(p.Records), p.Next, err)
		}
		// The same walk again, the same pages.
		p1, _ := s.List(ctx, ListQuery{Limit: 7, After: want[6]})
		p2, _ := s.List(ctx, ListQuery{Limit: 7, After: want[6]})
		if !slices.Equal(listedIDs(p1.Records), want[7:14]) || !slices.Equal(listedIDs(p2.Records), want[7:14]) || p1.Next != want[13] {
			t.Errorf("page after %s: %v then %v (next %q); want %v", want[6], listedIDs(p1.Records), listedIDs(p2.Records), p1.Next, want[7:14])
		}
		// A cursor need not be a token's: the page starts after it.
		if p, err := s.List(ctx, ListQuery{Limit: 100, After: "tok_000000000000"}); err != nil || !slices.Equal(listedIDs(p.Records), want) {
			t.Errorf("after the lowest id: %v, %v", listedIDs(p.Records), err)
		}
		if p, err := s.List(ctx, ListQuery{Limit: 100, After: "tok_ffffffffffff"}); err != nil || len(p.Records) != 0 || p.Next != "" {
			t.Errorf("after the highest id: %+v, %v", p, err)
		}
	})
}

// Tokens created and revoked during a walk do not break it: every token
// there from its start to its end is listed exactly once, and the new ones
// at most once.
func TestStoreListPagesWhileWriting(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		before := map[string]bool{}
		for i := range 40 {
			before[issue(t, s, fmt.Sprintf("conv-%d", i%4), t0).ID()] = true
		}
		created := map[string]bool{}
		n := 0
		got := walkPages(t, s, ListQuery{Limit: 6}, func() {
			n++
			for range 3 {
				created[issue(t, s, "conv-new", t0).ID()] = true
			}
			if _, err := s.RevokeSandbox(ctx, fmt.Sprintf("conv-%d", n%4), t0.Add(time.Duration(n)*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
		seen := map[string]bool{}
		for _, id := range listedIDs(got) {
			if seen[id] {
				t.Errorf("%s listed twice", id)
			}
			seen[id] = true
			if !before[id] && !created[id] {
				t.Errorf("%s listed, never created", id)
			}
		}
		for id := range before {
			if !seen[id] {
				t.Errorf("%s, there all along, not listed", id)
			}
		}
		if len(created) == 0 {
			t.Fatal("the walk had a single page: nothing was created during it")
		}
	})
}

func TestStoreListFilters(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		now := t0.Add(30 * time.Minute)
		want := map[string][]string{} // by "sandbox/state", either part empty for any
		add := func(sandbox string, expires, revoked time.Time) {
			h := newHash(t)
			r := Record{Sandbox: sandbox, CreatedAt: expires.Add(-time.Hour), ExpiresAt: expires, RevokedAt: revoked}
			if err := s.Create(ctx, h, r); err != nil {
				t.Fatal(err)
			}
			state := string(r.StateAt(now))
			for _, k := range []string{"/", sandbox + "/", "/" + state, sandbox + "/" + state} {
				want[k] = append(want[k], h.ID())
			}
		}
		for range 4 {
			for _, sandbox := range []string{"conv-a", "conv-aa", "conv-b"} {
				add(sandbox, now.Add(time.Minute), time.Time{})          // live
				add(sandbox, now, time.Time{})                           // expired at now exactly
				add(sandbox, now.Add(-time.Hour), now.Add(-2*time.Hour)) // revoked and expired: revoked
				add(sandbox, now.Add(time.Hour), now.Add(-time.Minute))  // revoked
			}
			add("conv-a", now.Add(time.Microsecond), time.Time{}) // live for a microsecond more (PostgreSQL keeps no finer time)
		}
		for k := range want {
			slices.Sort(want[k])
		}
		if len(want["conv-a/live"]) != 8 || len(want["conv-b/expired"]) != 4 || len(want["/revoked"]) != 24 {
			t.Fatalf("the test's tokens are not what it means them to be: %v", want)
		}
		for _, sandbox := range []string{"", "conv-a", "conv-aa", "conv-b", "conv-none"} {
			for _, state := range append([]State{""}, States...) {
				for _, limit := range []int{1, 3, 100} {
					q := ListQuery{Limit: limit, Sandbox: sandbox, State: state, Now: now}
					if got := listedIDs(walkPages(t, s, q, nil)); !slices.Equal(got, want[sandbox+"/"+string(state)]) {
						t.Errorf("%+v: %v\nwant %v", q, got, want[sandbox+"/"+string(state)])
					}
				}
			}
		}
	})
}

func TestStoreCountStates(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		if _, ok := s.(*BoltStore); !ok {
			if _, ok := s.(stateCounter); !ok {
				t.Errorf("%T does not count in the database", s)
			}
		}
		now := t0.Add(30 * time.Minute)
		if counts, err := CountStates(ctx, s, now); err != nil || counts[StateLive]+counts[StateRevoked]+counts[StateExpired] != 0 {
			t.Errorf("counts of an empty store: %v, %v", counts, err)
		}
		want := map[State]int{}
		for i := range 11 {
			r := Record{Sandbox: "conv-1", CreatedAt: t0, ExpiresAt: now.Add(time.Duration(i%3-1) * time.Minute)}
			if i%4 == 0 {
				r.RevokedAt = t0
			}
			if i == 10 {
				r.ExpiresAt = now // expired at now exactly
			}
			if err := s.Create(ctx, newHash(t), r); err != nil {
				t.Fatal(err)
			}
			want[r.StateAt(now)]++
		}
		counts, err := CountStates(ctx, s, now)
		if err != nil || counts[StateLive] != want[StateLive] || counts[StateRevoked] != want[StateRevoked] || counts[StateExpired] != want[StateExpired] {
			t.Errorf("CountStates = %v, %v; want %v", counts, err, want)
		}
	})
}

func TestStoreListRefuses(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		issue(t, s, "conv-1", t0)
		for _, q := range []ListQuery{
			{Limit: 0}, {Limit: -1}, {Limit: 1, Sandbox: "Conv"}, {Limit: 1, Sandbox: "a\x00b"}, {Limit: 1, State: "dead"},
		} {
			if _, err := s.List(ctx, q); err == nil || errors.Is(err, ErrBadCursor) {
				t.Errorf("List(%+v) = %v; want an error", q, err)
			}
		}
		for _, after := range []string{"x", "tok_", "tok_00000000000", "tok_0000000000000", "tok_ABCDEF000000", "tok_zzzzzzzzzzzz", "tik_000000000000"} {
			if _, err := s.List(ctx, ListQuery{Limit: 1, After: after}); !errors.Is(err, ErrBadCursor) {
				t.Errorf("List after %q = %v; want ErrBadCursor", after, err)
			}
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.List(done, ListQuery{Limit: 1}); !errors.Is(err, context.Canceled) {
			t.Errorf("List with a cancelled context: %v", err)
		}
	})
}

// Tokens whose IDs are one (their hashes share six bytes) are listed on one
// page, past its limit, because a cursor cannot point between them.
func TestStoreListSharedID(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		var hs []Hash
		for i := range 7 {
			h := Hash{0x10, 0x20, 0x30, 0x40, 0x50, 0x60, byte(i)}
			if i >= 4 {
				h = Hash{0x10, 0x20, 0x30, 0x40, 0x50, byte(0x60 + i)}
			}
			hs = append(hs, h)
			if err := s.Create(ctx, h, Record{Sandbox: "conv-1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, sandbox := range []string{"", "conv-1"} {
			p, err := s.List(ctx, ListQuery{Limit: 2, Sandbox: sandbox})
			if err != nil || len(p.Records) != 4 || p.Next != hs[0].ID() {
				t.Errorf("first page of 2 (sandbox %q): %v, next %q, %v; want the four of %s", sandbox, listedIDs(p.Records), p.Next, err, hs[0].ID())
			}
			p, err = s.List(ctx, ListQuery{Limit: 2, Sandbox: sandbox, After: p.Next})
			if err != nil || !slices.Equal(listedIDs(p.Records), []string{hs[4].ID(), hs[5].ID()}) || p.Next != hs[5].ID() {
				t.Errorf("second page (sandbox %q): %v, next %q, %v", sandbox, listedIDs(p.Records), p.Next, err)
			}
			p, err = s.List(ctx, ListQuery{Limit: 1, Sandbox: sandbox, After: p.Next})
			if err != nil || !slices.Equal(listedIDs(p.Records), []string{hs[6].ID()}) || p.Next != "" {
				t.Errorf("last page (sandbox %q): %v, next %q, %v", sandbox, listedIDs(p.Records), p.Next, err)
			}
		}
	})
}

func TestStoreUsage(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		if u, err := s.LoadUsage(ctx, "tok_x"); err != nil || u != (Usage{}) {
			t.Errorf("LoadUsage of nothing = %+v, %v; want zero", u, err)
		}
		day := UsageKey("tok_x", "2026-03-01")
		u1 := Usage{Requests: 1, Input: 2, Output: 3, CacheRead: 4, CacheWrite: 5, MCPCalls: 6}
		if err := s.SaveUsage(ctx, day, u1); err != nil {
			t.Fatal(err)
		}
		if u, err := s.LoadUsage(ctx, day); err != nil || u != u1 {
			t.Errorf("LoadUsage = %+v, %v; want %+v", u, err, u1)
		}
		if u, _ := s.LoadUsage(ctx, "tok_x"); u != (Usage{}) {
			t.Errorf("the lifetime window took the day's usage: %+v", u)
		}
		u2 := u1.Add(Usage{Requests: 1, Output: 1 << 40})
		if err := s.SaveUsage(ctx, day, u2); err != nil {
			t.Fatal(err)
		}
		if u, _ := s.LoadUsage(ctx, day); u != u2 {
			t.Errorf("after overwrite: %+v; want %+v", u, u2)
		}
	})
}

func TestStoreDurableAcrossReopen(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, reopen func(Store) Store) {
		kept, revoked := issue(t, s, "conv-1", t0), issue(t, s, "conv-2", t0.Add(time.Second))
		at := t0.Add(time.Minute)
		if _, err := s.RevokeSandbox(ctx, "conv-2", at); err != nil {
			t.Fatal(err)
		}
		u := Usage{Requests: 7, Input: 70}
		if err := s.SaveUsage(ctx, "tok_y", u); err != nil {
			t.Fatal(err)
		}
		s = reopen(s)
		if r, err := s.Lookup(ctx, kept); err != nil || !r.RevokedAt.IsZero() {
			t.Errorf("live token after reopen: %+v, %v", r, err)
		}
		if r, err := s.Lookup(ctx, revoked); err != nil || !r.RevokedAt.Equal(at) {
			t.Errorf("revoked token after reopen: %+v, %v", r, err)
		}
		if got, err := s.LoadUsage(ctx, "tok_y"); err != nil || got != u {
			t.Errorf("usage after reopen: %+v, %v", got, err)
		}
		if recs, err := listAll(ctx, s); err != nil || len(recs) != 2 || (recs[0].ID != kept.ID()) == (kept.ID() < revoked.ID()) {
			t.Errorf("List after reopen: %+v, %v", recs, err)
		}
	})
}
