package tokens

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// churnHash is the n-th token of a churn test: the same hashes each run, so
// the B-tree, and with it the file, grows the same way each run.
func churnHash(n int) Hash { return Hash(sha256.Sum256([]byte(strconv.Itoa(n)))) }

// mintBatch stores count tokens of sandbox, from the n-th churnHash on, in
// one transaction (a Create each would sync the file count times).
func mintBatch(t *testing.T, s *BoltStore, sandbox string, n, count int) []Hash {
	t.Helper()
	hs := make([]Hash, count)
	err := s.db.Update(func(tx *bolt.Tx) error {
		for i := range hs {
			hs[i] = churnHash(n + i)
			r := Record{Sandbox: sandbox, Profile: "default", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
			if err := insert(tx, hs[i], r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// pruneAll prunes every token of s that died at or before cutoff, in
// batches as serve does.
func pruneAll(t *testing.T, s *BoltStore, cutoff time.Time) {
	t.Helper()
	const batch = 500
	for {
		pruned, err := s.Prune(ctx, cutoff, batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(pruned) < batch {
			return
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Under churn (tokens minted, revoked and pruned, round after round) the
// file stops growing: bbolt puts new records in the pages pruned ones freed.
// Without pruning it grows in steps, each twice the last, so its size stays
// put for about as many rounds as it took to reach it: flat must be more than
// half the rounds for the test to tell the two apart.
func TestBoltFileStopsGrowingUnderChurn(t *testing.T) {
	const rounds, perRound, flat = 16, 150, 10
	s, path := openTemp(t)
	var sizes []int64
	for round := range rounds {
		sandbox := "conv-" + strconv.Itoa(round)
		at := t0.Add(time.Duration(round) * time.Minute)
		for i := range perRound {
			r := Record{Sandbox: sandbox, Profile: "default", CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
			if err := s.Create(ctx, churnHash(round*perRound+i), r); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := s.RevokeSandbox(ctx, sandbox, at); n != perRound || err != nil {
			t.Fatalf("RevokeSandbox: %d, %v", n, err)
		}
		pruneAll(t, s, at)
		sizes = append(sizes, fileSize(t, path))
	}
	plateau := sizes[rounds-flat-1]
	for _, size := range sizes[rounds-flat:] {
		if size != plateau {
			t.Fatalf("file sizes after each round: %v; want the last %d the same", sizes, flat+1)
		}
	}
}

// A store grown by a burst of tokens and then emptied of most of them keeps
// its size; compacted, it shrinks, keeps its mode, and what it still holds
// works.
func TestBoltCompact(t *testing.T) {
	s, path := openTemp(t)
	kept := issue(t, s, "conv-keep", t0.Add(24*time.Hour))
	if err := s.SaveUsage(ctx, UsageKey(kept.ID(), ""), Usage{Requests: 2}); err != nil {
		t.Fatal(err)
	}
	mintBatch(t, s, "conv-burst", 0, 5000)
	pruneAll(t, s, t0.Add(2*time.Hour))
	s.Close()
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	grown := fileSize(t, path)

	before, after, err := CompactBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	if before != grown || after != fileSize(t, path) || after >= before/4 {
		t.Errorf("CompactBolt: %d → %d bytes (file %d → %d); want a quarter of it at most", before, after, grown, fileSize(t, path))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after compacting: %v; want 0640", fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(path + ".compact-*"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if fileSchema(t, path) != BoltSchemaVersion() {
		t.Errorf("schema after compacting: %d", fileSchema(t, path))
	}
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Lookup(ctx, kept); err != nil || r.Sandbox != "conv-keep" {
		t.Errorf("Lookup of the token kept: %+v, %v", r, err)
	}
	if u, err := s.LoadUsage(ctx, UsageKey(kept.ID(), "")); err != nil || u.Requests != 2 {
		t.Errorf("usage kept: %+v, %v", u, err)
	}
}

// A store in use is not compacted: the error says the store is held, and the
// file is untouched.
func TestBoltCompactLocked(t *testing.T) {
	s, path := openTemp(t)
	issue(t, s, "conv-1", t0)
	before, _ := os.ReadFile(path)
	_, _, err := CompactBolt(path)
	if !errors.Is(err, ErrLocked) {
		t.Errorf("CompactBolt of a store in use: %v; want ErrLocked", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the file changed")
	}
	if left, _ := filepath.Glob(path + ".compact-*"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// CompactBolt refuses what OpenBolt refuses, and a path with no store.
func TestBoltCompactRefuses(t *testing.T) {
	dir := t.TempDir()
	newer := filepath.Join(dir, "newer.db")
	db, err := bolt.Open(newer, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucket(bucketMeta)
		return b.Put(keySchema, []byte(strconv.Itoa(BoltSchemaVersion()+1)))
	})
	db.Close()
	foreign := filepath.Join(dir, "foreign.db")
	os.WriteFile(foreign, []byte("not a database\n"), 0o600)
	for path, want := range map[string]string{
		newer:                         "newer cproxy",
		foreign:                       "not a usable cproxy token store",
		filepath.Join(dir, "none.db"): "no store at",
	} {
		before, _ := os.ReadFile(path)
		if _, _, err := CompactBolt(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CompactBolt(%s): %v; want %q", filepath.Base(path), err, want)
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Errorf("%s changed", filepath.Base(path))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "none.db")); err == nil {
		t.Error("CompactBolt created a store where there was none")
	}
}

// A cproxy that waits for the store's lock while the store is compacted
// opens the compacted file, not the one compaction replaced, whose changes
// would be lost.
func TestBoltOpenFollowsReplacedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.db")
	holder, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(dir, "next.db")
	s, err := OpenBolt(next)
	if err != nil {
		t.Fatal(err)
	}
	h := issue(t, s, "conv-1", t0)
	s.Close()

	type opened struct {
		s   *BoltStore
		err error
	}
	done := make(chan opened)
	go func() {
		s, err := OpenBolt(path)
		done <- opened{s, err}
	}()
	// The holder has the file open; wait for the waiter to have it open too.
	for openedFiles(t, path) < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	holder.Close()
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.s.Close()
	if _, err := got.s.Lookup(ctx, h); err != nil {
		t.Errorf("Lookup of the replacement's token: %v; the waiter opened the replaced file", err)
	}
}

// openedFiles counts this process's open files that are path.
func openedFiles(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("listing open files: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

// A store path that is a symbolic link is refused, naming its target, and
// the link and the target are left as they were: renaming the compacted
// file over the link would leave the target with the old tokens, revoked
// ones included, for whoever points the link back at it.
func TestBoltCompactRefusesSymlink(t *testing.T) {
	s, target := openTemp(t)
	issue(t, s, "conv-1", t0)
	s.Close()
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(target)
	_, _, err := CompactBolt(link)
	if err == nil || !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), link+" links to "+target) {
		t.Errorf("CompactBolt of a link: %v; want ErrSymlink naming the link and its target", err)
	}
	if got, err := os.Readlink(link); err != nil || got != target {
		t.Errorf("the link now: %q, %v", got, err)
	}
	if after, _ := os.ReadFile(target); string(after) != string(before) {
		t.Error("the target changed")
	}
}

// The new file is made where nothing is: a link put in its name's place
// beforehand makes compacting fail, and its target (a file compacting, as
// root, would otherwise have overwritten and handed to the store's owner)
// is untouched, as are the store and the link.
func TestBoltCompactTempIsNotFollowed(t *testing.T) {
	s, path := openTemp(t)
	issue(t, s, "conv-1", t0)
	s.Close()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root's file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".compact-planted"
	if err := os.Symlink(victim, tmp); err != nil {
		t.Fatal(err)
	}
	store, _ := os.ReadFile(path)
	if _, _, err := compactBolt(path, func() string { return tmp }); err == nil {
		t.Error("compacting through a planted link succeeded")
	}
	if got, _ := os.ReadFile(victim); string(got) != "root's file\n" {
		t.Errorf("the link's target now holds %d bytes", len(got))
	}
	if got, err := os.Readlink(tmp); err != nil || got != victim {
		t.Errorf("the planted link now: %q, %v", got, err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(store) {
		t.Error("the store changed")
	}
}
