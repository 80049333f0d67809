package tokens

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var updateFixture = flag.Bool("update-store-fixture", false, "rewrite testdata/store-schema3.db with this code (only while it writes schema 3)")

// storeFixture is a store as cproxy wrote it at schema 3, the first schema of
// a released cproxy that carried every Record field; every later cproxy must
// open it with what it holds intact.
const storeFixture = "testdata/store-schema3.db"

// fixtureRecords are what storeFixture holds, by hash: a live token with
// every field set, and a revoked one.
var fixtureRecords = map[Hash]Record{
	{1}: {Sandbox: "conv-1", Profile: "web", Source: "10.20.0.0/16", Bind: "socket",
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
		Values: []byte("sealed values"), Budget: json.RawMessage(`{"requests":10}`)},
	{2}: {Sandbox: "conv-2", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), RevokedAt: t0.Add(time.Minute)},
}

// fixtureUsage is the usage storeFixture holds, under the live token's
// lifetime key.
var fixtureUsage = Usage{Requests: 3, Input: 100, Output: 20, CacheRead: 5, CacheWrite: 1}

// writeStoreFixture writes storeFixture with this code, which must be at
// schema 3: go test ./tokens -run TestBoltOpensSchema3Store -update-store-fixture.
func writeStoreFixture(t *testing.T) {
	if BoltSchemaVersion() != 3 {
		t.Fatalf("this code writes schema %d; the fixture is a schema 3 store", BoltSchemaVersion())
	}
	os.Remove(storeFixture)
	s, err := OpenBolt(storeFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for h, r := range fixtureRecords {
		revoked := r.RevokedAt
		r.RevokedAt = time.Time{}
		if err := s.Create(ctx, h, r); err != nil {
			t.Fatal(err)
		}
		if !revoked.IsZero() {
			if _, err := s.RevokeSandbox(ctx, r.Sandbox, revoked); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.SaveUsage(ctx, UsageKey(Hash{1}.ID(), ""), fixtureUsage); err != nil {
		t.Fatal(err)
	}
}

// A store written at schema 3 opens, is brought up to this code's schema,
// and keeps its tokens, revocations and usage.
func TestBoltOpensSchema3Store(t *testing.T) {
	if *updateFixture {
		writeStoreFixture(t)
	}
	b, err := os.ReadFile(storeFixture)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatalf("opening a schema 3 store: %v", err)
	}
	for h, want := range fixtureRecords {
		got, err := s.Lookup(ctx, h)
		if err != nil {
			t.Fatalf("Lookup %s: %v", h.ID(), err)
		}
		want.ID = h.ID()
		checkRecord(t, got, want)
	}
	if u, err := s.LoadUsage(ctx, UsageKey(Hash{1}.ID(), "")); err != nil || u != fixtureUsage {
		t.Errorf("usage: %+v, %v; want %+v", u, err, fixtureUsage)
	}
	if n, err := s.RevokeSandbox(ctx, "conv-1", t0.Add(2*time.Minute)); n != 1 || err != nil {
		t.Errorf("RevokeSandbox in the upgraded store: %d, %v; want 1", n, err)
	}
	s.Close()
	if v := fileSchema(t, path); v != BoltSchemaVersion() {
		t.Errorf("schema after opening: %d; want %d", v, BoltSchemaVersion())
	}
}

// A store at schema 1 (tokens without a source, binding, values or budget,
// and no usage bucket) is brought up to this code's schema with its tokens.
func TestBoltUpgradesSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := Hash{7}
	old := Record{ID: h.ID(), Sandbox: "conv-7", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		toks, _ := tx.CreateBucket(bucketTokens)
		idx, _ := tx.CreateBucket(bucketSandboxes)
		v, _ := json.Marshal(old)
		for _, err := range []error{meta.Put(keySchema, []byte("1")), toks.Put(h[:], v), idx.Put(indexKey(old.Sandbox, h), []byte{})} {
			if err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatalf("opening a schema 1 store: %v", err)
	}
	if got, err := s.Lookup(ctx, h); err != nil {
		t.Errorf("Lookup: %v", err)
	} else {
		checkRecord(t, got, old)
	}
	if err := s.SaveUsage(ctx, UsageKey(h.ID(), ""), Usage{Requests: 1}); err != nil {
		t.Errorf("saving usage in the upgraded store: %v", err)
	}
	s.Close()
	if v := fileSchema(t, path); v != BoltSchemaVersion() {
		t.Errorf("schema after opening: %d; want %d", v, BoltSchemaVersion())
	}
}

// The steps are numbered 1, 2, … in order: the version a file records is the
// number of steps applied to it.
func TestBoltMigrationsInOrder(t *testing.T) {
	for i, m := range boltMigrations {
		if m.version != i+1 || m.what == "" || m.apply == nil {
			t.Errorf("boltMigrations[%d] = version %d %q; want version %d, described, with a step", i, m.version, m.what, i+1)
		}
	}
}

// fileSchema reads the schema version recorded in the store file at path.
func fileSchema(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	err = db.View(func(tx *bolt.Tx) error {
		v, err = strconv.Atoi(string(tx.Bucket(bucketMeta).Get(keySchema)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
