package tokens

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx = context.Background()
)

func openTemp(t testing.TB) (*BoltStore, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "tokens.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// issue creates a fresh token for sandbox in s.
func issue(t testing.TB, s Store, sandbox string, created time.Time) Hash {
	t.Helper()
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	h := tok.Hash()
	if err := s.Create(ctx, h, Record{Sandbox: sandbox, CreatedAt: created, ExpiresAt: created.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestBoltCreateLookupList(t *testing.T) {
	s, _ := openTemp(t)
	local := time.FixedZone("somewhere", 5*3600)

	h1 := issue(t, s, "conv-1", t0.Add(2*time.Minute))
	h2 := issue(t, s, "conv-2", t0.Add(time.Minute))
	h3 := issue(t, s, "conv-2", t0.Add(time.Minute))
	tok, _ := New()
	h4 := tok.Hash()
	want4 := Record{ID: "ignored", Sandbox: "conv-3", Profile: "reviewer", CreatedAt: t0.In(local), ExpiresAt: t0.Add(time.Hour).In(local)}
	if err := s.Create(ctx, h4, want4); err != nil {
		t.Fatal(err)
	}

	got, err := s.Lookup(ctx, h4)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != h4.ID() || got.Sandbox != "conv-3" || got.Profile != "reviewer" ||
		!got.CreatedAt.Equal(t0) || !got.ExpiresAt.Equal(t0.Add(time.Hour)) || !got.RevokedAt.IsZero() {
		t.Errorf("Lookup = %+v, want %+v with ID %s", got, want4, h4.ID())
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt stored in %v, want UTC", got.CreatedAt.Location())
	}
	if err := got.Check(t0.Add(time.Minute)); err != nil {
		t.Errorf("Check of a fresh record: %v", err)
	}

	unknown, _ := New()
	if _, err := s.Lookup(ctx, unknown.Hash()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of unknown hash: err = %v, want ErrNotFound", err)
	}
	if err := s.Create(ctx, h1, Record{Sandbox: "conv-9", ExpiresAt: t0}); err == nil {
		t.Error("Create of an existing hash succeeded")
	}
	if r, _ := s.Lookup(ctx, h1); r.Sandbox != "conv-1" {
		t.Errorf("duplicate Create overwrote the record: %+v", r)
	}
	bad, _ := New()
	for _, sandbox := range []string{"", "Conv", "a\x00b", strings.Repeat("a", 64)} {
		if err := s.Create(ctx, bad.Hash(), Record{Sandbox: sandbox, ExpiresAt: t0}); err == nil {
			t.Errorf("Create with sandbox %q succeeded", sandbox)
		}
	}

	list, err := listAll(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{h1.ID(), h2.ID(), h3.ID(), h4.ID()}
	slices.Sort(want)
	if got := listedIDs(list); !slices.Equal(got, want) {
		t.Errorf("List order = %v, want %v (by ID)", got, want)
	}
}

// CreateAll stores every record as Create would, or none: a bad sandbox id or a hash already stored refuses
// the whole batch.
func TestBoltCreateAll(t *testing.T) {
	s, _ := openTemp(t)
	batch := map[Hash]Record{}
	for i := range 3 {
		tok, _ := New()
		batch[tok.Hash()] = Record{Sandbox: fmt.Sprintf("conv-%d", i), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	}
	if err := s.CreateAll(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for h, want := range batch {
		got, err := s.Lookup(ctx, h)
		if err != nil || got.ID != h.ID() || got.Sandbox != want.Sandbox || !got.ExpiresAt.Equal(want.ExpiresAt) {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v", h.ID(), got, err, want)
		}
	}
	if n, err := s.RevokeSandbox(ctx, "conv-1", t0); err != nil || n != 1 {
		t.Errorf("RevokeSandbox of a sandbox created in bulk = %d, %v; want 1 (the sandbox index)", n, err)
	}

	fresh, _ := New()
	var old Hash
	for h := range batch {
		old = h
		break
	}
	for name, bad := range map[string]map[Hash]Record{
		"bad sandbox": {fresh.Hash(): {Sandbox: "conv-4", ExpiresAt: t0}, old: {Sandbox: "Conv", ExpiresAt: t0}},
		"stored hash": {fresh.Hash(): {Sandbox: "conv-4", ExpiresAt: t0}, old: {Sandbox: "conv-5", ExpiresAt: t0}},
	} {
		if err := s.CreateAll(ctx, bad); err == nil {
			t.Errorf("%s: CreateAll succeeded", name)
		}
		if _, err := s.Lookup(ctx, fresh.Hash()); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: the batch's good record was stored: %v", name, err)
		}
	}
	if list, _ := listAll(ctx, s); len(list) != 3 {
		t.Errorf("List has %d records after the refused batches, want 3", len(list))
	}
}

// A sandbox of more tokens than a batch is revoked whole, its tokens
// already revoked keeping their time, and none in memory stays live.
func TestBoltRevokeSandboxInBatches(t *testing.T) {
	s, _ := openTemp(t)
	const many = 3*revokeBatch + 5
	recs := map[Hash]Record{}
	var hs []Hash
	for i := range many {
		h := newHash(t)
		r := Record{Sandbox: "many", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		if i%10 == 0 {
			r.RevokedAt = t0
		}
		recs[h], hs = r, append(hs, h)
	}
	other := newHash(t)
	recs[other] = Record{Sandbox: "many-more", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := s.CreateAll(ctx, recs); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if _, err := s.Lookup(ctx, h); err != nil { // cached now
			t.Fatal(err)
		}
	}
	at := t0.Add(time.Minute)
	if n, err := s.RevokeSandbox(ctx, "many", at); err != nil || n != many-many/10-1 {
		t.Fatalf("RevokeSandbox = %d, %v; want %d", n, err, many-many/10-1)
	}
	for i, h := range hs {
		want := at
		if i%10 == 0 {
			want = t0
		}
		if r, err := s.Lookup(ctx, h); err != nil || !r.RevokedAt.Equal(want) {
			t.Fatalf("token %d after the revocation: %+v, %v; want revoked at %v", i, r, err, want)
		}
	}
	if r, _ := s.Lookup(ctx, other); !r.RevokedAt.IsZero() {
		t.Error("revoking many revoked many-more")
	}
}

func TestBoltRevokeSandbox(t *testing.T) {
	s, path := openTemp(t)
	a1 := issue(t, s, "a", t0)
	a2 := issue(t, s, "a", t0)
	ab := issue(t, s, "a-b", t0) // shares the prefix "a"
	b := issue(t, s, "b", t0)
	revokedAt := t0.Add(10 * time.Minute)

	n, err := s.RevokeSandbox(ctx, "a", revokedAt)
	if err != nil || n != 2 {
		t.Fatalf("RevokeSandbox = %d, %v; want 2, nil", n, err)
	}
	if n, err := s.RevokeSandbox(ctx, "a", revokedAt.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("second RevokeSandbox = %d, %v; want 0, nil", n, err)
	}
	if n, err := s.RevokeSandbox(ctx, "nobody", revokedAt); err != nil || n != 0 {
		t.Errorf("RevokeSandbox of a sandbox without tokens = %d, %v; want 0, nil", n, err)
	}
	if _, err := s.RevokeSandbox(ctx, "-a", revokedAt); err == nil {
		t.Error("RevokeSandbox accepted an invalid sandbox id")
	}
	if _, err := s.RevokeSandbox(ctx, "b", time.Time{}); err == nil {
		t.Error("RevokeSandbox accepted a zero time, which would revoke nothing")
	}

	check := func(s Store) {
		t.Helper()
		for h, want := range map[Hash]error{a1: ErrRevoked, a2: ErrRevoked, ab: nil, b: nil} {
			r, err := s.Lookup(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Check(t0.Add(time.Minute)); got != want {
				t.Errorf("%s of sandbox %s: Check = %v, want %v", r.ID, r.Sandbox, got, want)
			}
			if want != nil && !r.RevokedAt.Equal(revokedAt) {
				t.Errorf("%s: RevokedAt = %v, want the first revocation %v", r.ID, r.RevokedAt, revokedAt)
			}
		}
	}
	check(s)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	check(reopened)
	if list, err := listAll(ctx, reopened); err != nil || len(list) != 4 {
		t.Errorf("List after reopen = %d records, %v; want 4", len(list), err)
	}
}

func TestBoltPermissions(t *testing.T) {
	_, path := openTemp(t)
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v", p, got, want)
		}
	}
}

func TestBoltLocked(t *testing.T) {
	_, path := openTemp(t)
	start := time.Now()
	s, err := OpenBolt(path)
	if err == nil {
		s.Close()
		t.Fatal("a second OpenBolt of the same file succeeded")
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("second OpenBolt took %v to fail", elapsed)
	}
	if !errors.Is(err, ErrLocked) {
		t.Errorf("err = %v, want ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "another cproxy") {
		t.Errorf("error %q does not name the path and say another cproxy is probably using it", msg)
	}
}

func TestBoltRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	random := make([]byte, 64<<10)
	rand.Read(random)

	// A real store with enough records to span several pages, to cut short.
	good, goodPath := openTemp(t)
	for range 50 {
		issue(t, good, "a", t0)
	}
	good.Close()
	store, err := os.ReadFile(goodPath)
	if err != nil {
		t.Fatal(err)
	}

	foreignBolt := func(path string, fill func(*bolt.Tx) error) {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(fill); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}

	for _, tc := range []struct {
		name  string
		setup func(path string)
		want  string
	}{
		{"text", func(path string) { os.WriteFile(path, []byte("hello, this is not a database\n"), 0o600) }, "move it aside"},
		{"random", func(path string) { os.WriteFile(path, random, 0o600) }, "move it aside"},
		{"text above a page", func(path string) { os.WriteFile(path, bytes.Repeat([]byte("x"), 5000), 0o600) }, "move it aside"},
		{"first page of a store", func(path string) { os.WriteFile(path, store[:4096], 0o600) }, "move it aside"},
		{"truncated store", func(path string) { os.WriteFile(path, store[:len(store)/2], 0o600) }, "move it aside"},
		{"store with both meta pages zeroed", func(path string) {
			os.WriteFile(path, append(make([]byte, 8192), store[8192:]...), 0o600)
		}, "move it aside"},
		{"other bolt database", func(path string) {
			foreignBolt(path, func(tx *bolt.Tx) error {
				_, err := tx.CreateBucket([]byte("other"))
				return err
			})
		}, "move it aside"},
		{"newer schema", func(path string) {
			foreignBolt(path, func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket(bucketMeta)
				if err != nil {
					return err
				}
				return b.Put(keySchema, []byte(strconv.Itoa(BoltSchemaVersion()+1)))
			})
		}, "newer cproxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			tc.setup(path)
			before, _ := os.ReadFile(path)
			s, err := OpenBolt(path)
			if err == nil {
				s.Close()
				t.Fatal("OpenBolt succeeded")
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not name the path and say %q", msg, tc.want)
			}
			if errors.Is(err, ErrLocked) {
				t.Errorf("error %v wraps ErrLocked", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("OpenBolt changed the file it refused")
			}
		})
	}
}

func TestBoltEmptyFileBecomesStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	issue(t, s, "a", t0)
}

func TestBoltCancelledContext(t *testing.T) {
	s, _ := openTemp(t)
	h := issue(t, s, "a", t0)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Lookup(cancelled, h); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup: err = %v, want context.Canceled", err)
	}
	if err := s.Create(cancelled, Hash{1}, Record{Sandbox: "a"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Create: err = %v, want context.Canceled", err)
	}
	if _, err := s.RevokeSandbox(cancelled, "a", t0); !errors.Is(err, context.Canceled) {
		t.Errorf("RevokeSandbox: err = %v, want context.Canceled", err)
	}
	if _, err := s.List(cancelled, ListQuery{Limit: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("List: err = %v, want context.Canceled", err)
	}
	if _, err := s.Prune(cancelled, t0.Add(2*time.Hour), PruneBatch); !errors.Is(err, context.Canceled) {
		t.Errorf("Prune: err = %v, want context.Canceled", err)
	}
	if _, err := s.Lookup(ctx, h); err != nil {
		t.Errorf("a cancelled Prune deleted the token: %v", err)
	}
	if _, _, err := s.Prunable(cancelled, t0.Add(2*time.Hour), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Prunable: err = %v, want context.Canceled", err)
	}
}

func TestBoltConcurrent(t *testing.T) {
	s, _ := openTemp(t)
	shared := issue(t, s, "shared", t0)
	const workers, each = 16, 10

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			sandbox := fmt.Sprintf("w-%d", w)
			for i := range each {
				h := issue(t, s, sandbox, t0.Add(time.Duration(i)*time.Second))
				if r, err := s.Lookup(ctx, h); err != nil || r.Sandbox != sandbox {
					t.Errorf("Lookup of own token = %+v, %v", r, err)
				}
				if r, err := s.Lookup(ctx, shared); err != nil || r.Sandbox != "shared" {
					t.Errorf("Lookup of shared token = %+v, %v", r, err)
				}
			}
			if w%4 == 0 {
				if n, err := s.RevokeSandbox(ctx, sandbox, t0); err != nil || n != each {
					t.Errorf("RevokeSandbox(%s) = %d, %v; want %d", sandbox, n, err, each)
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := listAll(ctx, s); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()

	list, err := listAll(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	revoked := 0
	for _, r := range list {
		if !r.RevokedAt.IsZero() {
			revoked++
		}
	}
	if len(list) != workers*each+1 || revoked != workers/4*each {
		t.Errorf("after the run: %d records, %d revoked; want %d, %d", len(list), revoked, workers*each+1, workers/4*each)
	}
}

// BenchmarkLookup measures the store's share of every proxied request.
func BenchmarkLookup(b *testing.B) {
	s, _ := openTemp(b)
	const n = 10000
	hashes := make([]Hash, n)
	err := s.db.Update(func(tx *bolt.Tx) error {
		for i := range hashes {
			tok, err := New()
			if err != nil {
				return err
			}
			hashes[i] = tok.Hash()
			r := Record{Sandbox: fmt.Sprintf("sandbox-%d", i%100), Profile: "default", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
			if err := insert(tx, hashes[i], r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}

	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.Lookup(ctx, hashes[i%n]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := s.Lookup(ctx, hashes[i%n]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	})
}

// Each Prune call takes up the scan where the one before stopped, so that
// a backlog of dead tokens costs one pass over the store, not a pass per
// batch; it goes round to the start, so tokens before where it stopped
// (dead since, or minted in between) are not missed.
func TestBoltPruneResumes(t *testing.T) {
	s, _ := openTemp(t)
	cutoff := t0.Add(2 * time.Hour)
	live := map[Hash]bool{}
	for i := range 40 {
		h := issue(t, s, "conv-1", t0)
		if i%2 == 0 {
			// Live long after the cutoff.
			if err := s.db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketTokens).Put(h[:], []byte(`{"id":"`+h.ID()+`","sandbox":"conv-1","expires_at":"2100-01-01T00:00:00Z"}`))
			}); err != nil {
				t.Fatal(err)
			}
			live[h] = true
		}
	}
	first, err := s.Prune(ctx, cutoff, 3)
	if err != nil || len(first) != 3 {
		t.Fatalf("first batch: %d, %v", len(first), err)
	}
	// More dead tokens, wherever their hashes fall.
	for range 10 {
		issue(t, s, "conv-2", t0)
	}
	total := len(first)
	for {
		pruned, err := s.Prune(ctx, cutoff, 3)
		if err != nil {
			t.Fatal(err)
		}
		total += len(pruned)
		if len(pruned) < 3 {
			break
		}
	}
	if total != 30 {
		t.Errorf("pruned %d of 30 dead tokens", total)
	}
	n, _, err := s.Prunable(ctx, cutoff, 1)
	if err != nil || n != 0 {
		t.Errorf("after the batches, %d prunable left, %v", n, err)
	}
	for h := range live {
		if _, err := s.Lookup(ctx, h); err != nil {
			t.Errorf("a live token went: %v", err)
		}
	}
}

// Scans that each start where the one before stopped read the store about
// once between them, however many batches a backlog of dead tokens takes:
// the batches' pass, and the last scan's round to where it began (so that
// a scan that finds fewer than its limit has read every record).
func TestBoltPruneScanOnePass(t *testing.T) {
	s, _ := openTemp(t)
	cutoff := t0.Add(2 * time.Hour)
	dead := 0
	for i := range 120 {
		h := issue(t, s, "conv-1", t0)
		if i%3 == 0 {
			dead++
			continue
		}
		if err := s.db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketTokens).Put(h[:], []byte(`{"id":"`+h.ID()+`","sandbox":"conv-1","expires_at":"2100-01-01T00:00:00Z"}`))
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Read transactions of 7 records: a scan reads on in the next.
	s.readLimit = 7
	if n, _, err := s.Prunable(ctx, cutoff, 1); err != nil || n != dead {
		t.Errorf("Prunable in read transactions of 7 = %d, %v; want %d", n, err, dead)
	}
	var from []byte
	total, read := 0, 0
	for {
		found, next, n, err := s.pruneScan(ctx, from, cutoff, 3)
		if err != nil {
			t.Fatal(err)
		}
		from, read = next, read+n
		if err := s.db.Update(func(tx *bolt.Tx) error {
			for _, h := range found {
				if err := tx.Bucket(bucketTokens).Delete(h[:]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		total += len(found)
		if len(found) < 3 {
			break
		}
	}
	if total != dead {
		t.Errorf("the scans found %d of %d dead tokens", total, dead)
	}
	// Scans that each began at the first key would read about 900.
	if read > 2*120 {
		t.Errorf("the scans read %d records of 120 in %d batches; want at most two passes", read, (dead+2)/3)
	}
}
