package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

const (
	// lockTimeout bounds how long OpenBolt waits for another process to let go of the file, so a second
	// `cproxy serve` fails promptly instead of hanging.
	lockTimeout = time.Second
)

var (
	bucketMeta   = []byte("meta")
	bucketTokens = []byte("tokens")
	// bucketSandboxes indexes tokens by sandbox (key: sandbox + "\x00" + hash, empty value) so RevokeSandbox
	// touches only that sandbox's tokens.
	bucketSandboxes = []byte("sandboxes")
	// bucketUsage holds each budget window's usage (key: UsageKey, value: JSON Usage).
	bucketUsage = []byte("usage")
	// bucketMCPPins holds the MCP route's tool pins (key: server + "\x00" + tool, value: JSON MCPPin).
	bucketMCPPins = []byte("mcp_pins")
	// bucketApprovals holds the approval requests and their grants (key: Approval.ID, value: JSON Approval).
	bucketApprovals = []byte("approvals")

	keySchema = []byte("schema_version")
)

// boltMigration is one step of the embedded store's schema: the version it brings a file to, what that version
// adds, and how. A step may only add (buckets, fields that older records lack), so that every record a file holds
// stays readable as it is.
type boltMigration struct {
	version int
	what    string
	apply   func(tx *bolt.Tx) error
}

// boltMigrations are the embedded store's schema versions, in order, as tokens/migrations are PostgreSQL's. OpenBolt
// applies the ones a file lacks in the transaction that opens it, so a file is either wholly at the newest version
// or left as it was. Add a step, never change one: files written by a released cproxy are at each of them.
//
// A version is bumped even when a step has nothing to do (2, and 3's record fields), because the number is what
// keeps an older cproxy off a store whose records it would misread.
var boltMigrations = []boltMigration{
	{1, "the tokens and their per-sandbox index", createBuckets(bucketTokens, bucketSandboxes)},
	// An older cproxy would read a record without its binding and accept a bound token from anywhere.
	{2, "records may carry a source or a binding (Record.Source, Record.Bind)", func(*bolt.Tx) error { return nil }},
	// An older cproxy would serve budgeted tokens unmetered.
	{3, "records may carry values and a budget (Record.Values, Record.Budget); the usage bucket holds what each token has spent", createBuckets(bucketUsage)},
	// An older cproxy would not hold MCP tools to their pins.
	{4, "the MCP route's tool pins (MCPPin)", createBuckets(bucketMCPPins)},
	// An older cproxy would not know the approvals an operator gave.
	{5, "approval requests and their grants (Approval)", createBuckets(bucketApprovals)},
}

// BoltSchemaVersion is the newest schema of the embedded store this cproxy knows.
func BoltSchemaVersion() int { return len(boltMigrations) }

func createBuckets(names ...[]byte) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		for _, name := range names {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return nil
	}
}

// BoltStore is the single-machine Store: one bbolt file, held exclusively by one process.
//
// It keeps the records it has read in memory, because a look-up runs on every proxied request and reading and
// decoding the file cost more than the rest of cproxy's checks together. The cache cannot go stale: the file is
// locked to this process, so every change to it goes through Create or RevokeSandbox, and RevokeSandbox drops the
// records it revoked from the cache before it returns. A look-up that read the file before a revocation committed
// does not cache what it read (gen tells it so).
type BoltStore struct {
	db *bolt.DB

	mu    sync.RWMutex
	cache map[Hash]Record
	gen   uint64 // bumped by every revocation

	pruneMu   sync.Mutex
	pruneFrom []byte // the key Prune's next scan starts from (pruneScan); nil: the first
	readLimit int    // pruneReadLimit; smaller in tests
}

// cacheLimit bounds the records kept in memory; past it the cache starts again empty.
const cacheLimit = 1 << 16

var _ Store = (*BoltStore)(nil)

// OpenBolt opens (creating if needed) the embedded store at path. It creates the parent directory with 0700 and
// the file 0600.
//
// If another process holds the file it fails within about a second with an error wrapping ErrLocked. A file that
// is not a store of ours, or is corrupt, is refused with an error that names the path and the fix, rather than
// being overwritten; one at a newer schema than this cproxy knows, with an error wrapping ErrNewerSchema. A file
// at an older schema is upgraded in place (boltMigrations).
func OpenBolt(path string) (*BoltStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open token store: %w", err)
	}
	db, err := openFile(path)
	if err != nil {
		return nil, err
	}
	if err := noPanic(func() error { return db.Update(func(tx *bolt.Tx) error { return prepare(tx, path) }) }); err != nil {
		db.Close()
		if _, ok := err.(panicError); ok {
			return nil, notAStore(path, err)
		}
		return nil, err
	}
	return &BoltStore{db: db, cache: make(map[Hash]Record), readLimit: pruneReadLimit}, nil
}

// maxReplaced bounds how many times openFile follows a file replaced under it before it gives up.
const maxReplaced = 3

// openFile opens (creating if needed) the bbolt file at path with the lock that keeps it to this process. A file
// that was replaced while this process waited for its lock (CompactBolt renames its copy over the store) is let
// go and the file now at path opened instead: the replaced one is no longer the store, and what was written to it
// would be lost.
func openFile(path string) (*bolt.DB, error) {
	for range maxReplaced {
		before, statErr := os.Stat(path)
		db, err := openOnce(path)
		if err != nil {
			return nil, err
		}
		after, err := os.Stat(path)
		if statErr != nil || err == nil && os.SameFile(before, after) {
			return db, nil
		}
		db.Close()
	}
	return nil, fmt.Errorf("open token store %s: the file was replaced %d times while this cproxy waited for its lock", path, maxReplaced)
}

// openOnce opens the bbolt file at path and turns its errors into ours.
func openOnce(path string) (*bolt.DB, error) {
	var db *bolt.DB
	err := noPanic(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{
			Timeout: lockTimeout,
			// Statistics are shared counters that every read transaction updates; Lookup runs on every request.
			NoStatistics: true,
		})
		return err
	})
	var errno syscall.Errno
	var pathErr *fs.PathError
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is held by another process, probably another cproxy using the same store", ErrLocked, path)
	case errors.As(err, &pathErr):
		return nil, fmt.Errorf("open token store: %w", err)
	case errors.As(err, &errno):
		return nil, fmt.Errorf("open token store %s: %w", path, err)
	default:
		// bbolt reports most damage with unexported, unwrapped errors ("file size too small 5000"), so anything
		// that is not about the operating system is about the file's contents.
		return nil, notAStore(path, err)
	}
}

// panicError carries a panic from bbolt, which panics rather than returning an error on some damaged files (a
// truncated one, for instance).
type panicError struct{ v any }

func (e panicError) Error() string { return fmt.Sprint(e.v) }

// noPanic turns a panic in f into a panicError. A panic inside bbolt.Open leaks the file descriptor, which is
// acceptable for a store the caller cannot use anyway.
//
// A truncated file makes bbolt read past the end of its mapping, which is a memory fault (SIGBUS or SIGSEGV);
// SetPanicOnFault makes that a panic too, where it would otherwise crash the process or, depending on what
// happens to be mapped next, read garbage.
func noPanic(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if v := recover(); v != nil {
			err = panicError{v}
		}
	}()
	return f()
}

// prepare lays out a new store, or checks that an existing file is one of ours and brings it up to the newest
// schema this code knows.
func prepare(tx *bolt.Tx, path string) error {
	current, err := schemaOf(tx, path)
	if err != nil {
		return err
	}
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return fmt.Errorf("initialise token store %s: %w", path, err)
	}
	for _, m := range boltMigrations[current:] {
		if err := m.apply(tx); err != nil {
			return fmt.Errorf("upgrade token store %s to schema %d: %w", path, m.version, err)
		}
	}
	if current < BoltSchemaVersion() {
		if err := meta.Put(keySchema, []byte(strconv.Itoa(BoltSchemaVersion()))); err != nil {
			return fmt.Errorf("upgrade token store %s: %w", path, err)
		}
	}
	if tx.Bucket(bucketTokens) == nil || tx.Bucket(bucketSandboxes) == nil || tx.Bucket(bucketUsage) == nil || tx.Bucket(bucketMCPPins) == nil || tx.Bucket(bucketApprovals) == nil {
		return notAStore(path, errors.New("missing buckets"))
	}
	return nil
}

// schemaOf returns the schema version the store file records, 0 for a new, empty file. It refuses a file that is
// not a store of ours, and one at a newer schema than this code knows, which it would misread.
func schemaOf(tx *bolt.Tx, path string) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		if err := tx.ForEach(func([]byte, *bolt.Bucket) error { return errors.New("it holds data but no cproxy schema version") }); err != nil {
			return 0, notAStore(path, err)
		}
		return 0, nil
	}
	v, err := strconv.Atoi(string(meta.Get(keySchema)))
	if err != nil || v < 1 {
		return 0, notAStore(path, errors.New("missing or invalid schema version"))
	}
	if v > BoltSchemaVersion() {
		return 0, fmt.Errorf("%w: %s is at schema %d; this cproxy knows up to %d", ErrNewerSchema, path, v, BoltSchemaVersion())
	}
	return v, nil
}

func notAStore(path string, err error) error {
	return fmt.Errorf("%s is not a usable cproxy token store (%w); move it aside and cproxy will create a new, empty store (tokens issued from this one stop working)", path, err)
}

func (s *BoltStore) Create(ctx context.Context, h Hash, r Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !ValidSandboxID(r.Sandbox) {
		return errors.New("create token: invalid sandbox id")
	}
	err := s.db.Update(func(tx *bolt.Tx) error { return insert(tx, h, r) })
	if err != nil {
		return fmt.Errorf("create token %s: %w", h.ID(), err)
	}
	return nil
}

// CreateAll stores many records as Create stores one, in one transaction: all of them or, on an error, none. It
// is for loading tokens in bulk (the store-size benchmark mints a million), where a transaction per token would
// spend its time waiting for the disk. The records go in in key order, which bbolt writes fastest.
func (s *BoltStore) CreateAll(ctx context.Context, records map[Hash]Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	hashes := slices.SortedFunc(maps.Keys(records), func(a, b Hash) int { return bytes.Compare(a[:], b[:]) })
	for _, h := range hashes {
		if !ValidSandboxID(records[h].Sandbox) {
			return fmt.Errorf("create token %s: invalid sandbox id", h.ID())
		}
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, h := range hashes {
			if err := insert(tx, h, records[h]); err != nil {
				return fmt.Errorf("create token %s: %w", h.ID(), err)
			}
		}
		return nil
	})
}

func insert(tx *bolt.Tx, h Hash, r Record) error {
	r.ID = h.ID()
	r.CreatedAt = r.CreatedAt.UTC()
	r.ExpiresAt = r.ExpiresAt.UTC()
	r.RevokedAt = r.RevokedAt.UTC()
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	toks := tx.Bucket(bucketTokens)
	if toks.Get(h[:]) != nil {
		return errors.New("already exists")
	}
	if err := toks.Put(h[:], v); err != nil {
		return err
	}
	return tx.Bucket(bucketSandboxes).Put(indexKey(r.Sandbox, h), []byte{})
}

func (s *BoltStore) Lookup(ctx context.Context, h Hash) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	s.mu.RLock()
	r, ok := s.cache[h]
	gen := s.gen
	s.mu.RUnlock()
	if ok {
		return r, nil
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTokens).Get(h[:])
		if v == nil {
			return ErrNotFound
		}
		return decodeRecord(v, &r)
	})
	if err != nil {
		return Record{}, err
	}
	s.mu.Lock()
	if s.gen == gen {
		if len(s.cache) >= cacheLimit {
			s.cache = make(map[Hash]Record)
		}
		s.cache[h] = r
	}
	s.mu.Unlock()
	return r, nil
}

// revokeBatch is the most tokens RevokeSandbox revokes in one transaction. A transaction holds every page it
// writes in memory until it commits, so a sandbox of many tokens is revoked a batch at a time, in bounded memory.
const revokeBatch = 256

// RevokeSandbox revokes the sandbox's live tokens a batch at a time, each batch durable when its transaction
// commits, so that all of them are when it returns. A token the sandbox is given while it runs may be revoked too.
func (s *BoltStore) RevokeSandbox(ctx context.Context, sandbox string, at time.Time) (int, error) {
	if err := checkRevoke(ctx, sandbox, at); err != nil {
		return 0, err
	}
	at = at.UTC()
	prefix := indexKey(sandbox, Hash{})[:len(sandbox)+1]
	n := 0
	for from := prefix; from != nil; {
		var revoked []Hash
		err := s.db.Update(func(tx *bolt.Tx) error {
			revoked = revoked[:0]
			toks := tx.Bucket(bucketTokens)
			c := tx.Bucket(bucketSandboxes).Cursor()
			k, _ := c.Seek(from)
			for ; k != nil && bytes.HasPrefix(k, prefix) && len(revoked) < revokeBatch; k, _ = c.Next() {
				h := k[len(prefix):]
				v := toks.Get(h)
				if v == nil {
					continue
				}
				var r Record
				if err := decodeRecord(v, &r); err != nil {
					return err
				}
				if !r.RevokedAt.IsZero() {
					continue
				}
				if err := markRevoked(toks, h, &r, at); err != nil {
					return err
				}
				revoked = append(revoked, Hash(h))
			}
			// Where the next batch starts; a key is valid only within its transaction.
			from = nil
			if k != nil && bytes.HasPrefix(k, prefix) {
				from = bytes.Clone(k)
			}
			return nil
		})
		s.forget(revoked)
		if err != nil {
			return 0, fmt.Errorf("revoke tokens of sandbox %s: %w", sandbox, err)
		}
		n += len(revoked)
	}
	return n, nil
}

// RevokeToken revokes the tokens whose hash starts with id's six bytes, in one transaction: the tokens bucket is
// in hash order, so they are found with one seek.
func (s *BoltStore) RevokeToken(ctx context.Context, id string, at time.Time) ([]Record, error) {
	first, _, err := checkRevokeToken(ctx, id, at)
	if err != nil {
		return nil, err
	}
	prefix := first[:6]
	var recs []Record
	var revoked []Hash
	err = s.db.Update(func(tx *bolt.Tx) error {
		recs, revoked = recs[:0], revoked[:0]
		toks := tx.Bucket(bucketTokens)
		c := toks.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var r Record
			if err := decodeRecord(v, &r); err != nil {
				return err
			}
			if r.RevokedAt.IsZero() {
				if err := markRevoked(toks, k, &r, at.UTC()); err != nil {
					return err
				}
				revoked = append(revoked, Hash(k))
			}
			recs = append(recs, r)
		}
		return nil
	})
	s.forget(revoked)
	if err != nil {
		return nil, fmt.Errorf("revoke token %s: %w", id, err)
	}
	if len(recs) == 0 {
		return nil, ErrNotFound
	}
	return recs, nil
}

// markRevoked writes r, revoked at at, under the key h of the tokens bucket.
func markRevoked(toks *bolt.Bucket, h []byte, r *Record, at time.Time) error {
	r.RevokedAt = at
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return toks.Put(h, v)
}

// forget drops the records of hs from the cache after a revocation's
// transaction, whatever happened to it (it may have committed): the next
// look-up of these tokens reads the file, and one that read it before
// does not cache what it read.
func (s *BoltStore) forget(hs []Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	for _, h := range hs {
		delete(s.cache, h)
	}
}

// List reads the page with a bbolt cursor from where q.After points: over the tokens bucket, or over the
// sandbox's part of the sandbox index (whose keys end in the hash, so it too is in ID order).
func (s *BoltStore) List(ctx context.Context, q ListQuery) (Page, error) {
	after, err := listFrom(ctx, q)
	if err != nil {
		return Page{}, err
	}
	var p Page
	err = s.db.View(func(tx *bolt.Tx) error {
		toks := tx.Bucket(bucketTokens)
		c, prefix := toks.Cursor(), []byte(nil)
		if q.Sandbox != "" {
			c, prefix = tx.Bucket(bucketSandboxes).Cursor(), indexKey(q.Sandbox, Hash{})[:len(q.Sandbox)+1]
		}
		from := append(slices.Clip(prefix), after...)
		k, v := c.Seek(from)
		if after != nil && bytes.Equal(k, from) {
			k, v = c.Next()
		}
		next := func() (Record, bool, error) {
			for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				if prefix != nil {
					if v = toks.Get(k[len(prefix):]); v == nil {
						continue
					}
				}
				var r Record
				if err := decodeRecord(v, &r); err != nil {
					return Record{}, false, err
				}
				if q.State != "" && r.StateAt(q.Now) != q.State {
					continue
				}
				k, v = c.Next()
				return r, true, nil
			}
			return Record{}, false, nil
		}
		p, err = fillPage(q.Limit, next)
		return err
	})
	if err != nil {
		return Page{}, fmt.Errorf("list tokens: %w", err)
	}
	return p, nil
}

// sortRecords sorts recs by CreatedAt then ID, Prunable's order.
func sortRecords(recs []Record) {
	slices.SortStableFunc(recs, func(a, b Record) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

func (s *BoltStore) Close() error { return s.db.Close() }

// LoadUsage returns the usage saved under key; zero when there is none.
func (s *BoltStore) LoadUsage(ctx context.Context, key string) (Usage, error) {
	var u Usage
	if err := ctx.Err(); err != nil {
		return u, err
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketUsage).Get([]byte(key))
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &u)
	})
	if err != nil {
		return Usage{}, fmt.Errorf("load usage %s: %w", key, err)
	}
	return u, nil
}

// SaveUsage stores u under key; durable when it returns.
func (s *BoltStore) SaveUsage(ctx context.Context, key string, u Usage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v, err := json.Marshal(u)
	if err != nil {
		return err
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketUsage).Put([]byte(key), v) }); err != nil {
		return fmt.Errorf("save usage %s: %w", key, err)
	}
	return nil
}

func indexKey(sandbox string, h Hash) []byte {
	k := make([]byte, 0, len(sandbox)+1+len(h))
	k = append(k, sandbox...)
	k = append(k, 0)
	return append(k, h[:]...)
}

func decodeRecord(v []byte, r *Record) error {
	if err := json.Unmarshal(v, r); err != nil {
		return fmt.Errorf("corrupt token record: %w", err)
	}
	return nil
}

// Prune finds the dead tokens in a read transaction, which holds up nobody, reading on from where the call
// before stopped (pruneScan), and deletes them in a write transaction as short as the batch.
func (s *BoltStore) Prune(ctx context.Context, cutoff time.Time, limit int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.pruneMu.Lock()
	from := s.pruneFrom
	s.pruneMu.Unlock()
	found, next, _, err := s.pruneScan(ctx, from, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("prune tokens: %w", err)
	}
	s.pruneMu.Lock()
	s.pruneFrom = next
	s.pruneMu.Unlock()
	if len(found) == 0 {
		return nil, nil
	}
	var pruned []Record
	err = s.db.Update(func(tx *bolt.Tx) error {
		toks, usage := tx.Bucket(bucketTokens), tx.Bucket(bucketUsage)
		for _, h := range found {
			v := toks.Get(h[:])
			if v == nil {
				continue
			}
			var r Record
			if err := decodeRecord(v, &r); err != nil {
				return err
			}
			if !r.prunable(cutoff) {
				continue
			}
			if err := toks.Delete(h[:]); err != nil {
				return err
			}
			if err := tx.Bucket(bucketSandboxes).Delete(indexKey(r.Sandbox, h)); err != nil {
				return err
			}
			for _, key := range usageKeysOf(usage, r.ID) {
				if err := usage.Delete(key); err != nil {
					return err
				}
			}
			pruned = append(pruned, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prune tokens: %w", err)
	}
	// A look-up that read a pruned record before the deletion does not
	// cache it (gen), and none stays cached.
	s.mu.Lock()
	s.gen++
	for _, h := range found {
		delete(s.cache, h)
	}
	s.mu.Unlock()
	return pruned, nil
}

// pruneReadLimit bounds the records one read transaction of Prune or Prunable reads. bbolt cannot grow its
// file's mapping while a read transaction is open, nor reuse the pages freed since it began, so one that read a
// large store whole would hold up a token being minted and grow the file.
const pruneReadLimit = 10_000

// readRecords calls f with each record from the key from (nil: the first) on, in read transactions of at most
// s.readLimit records, until f returns false, the records end or ctx is done. It returns the key of the record f
// refused (to be read again), or nil at the end. f must copy a key it keeps: bbolt's are valid only in their
// transaction.
func (s *BoltStore) readRecords(ctx context.Context, from []byte, f func(k []byte, r Record) bool) ([]byte, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var next []byte
		refused := false
		err := s.db.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketTokens).Cursor()
			k, v := c.First()
			if from != nil {
				k, v = c.Seek(from)
			}
			for n := 0; k != nil; n++ {
				if n == s.readLimit {
					next = bytes.Clone(k)
					return nil
				}
				var r Record
				if err := decodeRecord(v, &r); err != nil {
					return err
				}
				if !f(k, r) {
					next, refused = bytes.Clone(k), true
					return nil
				}
				k, v = c.Next()
			}
			return nil
		})
		if err != nil || next == nil || refused {
			return next, err
		}
		from = next
	}
}

// pruneScan returns the keys of at most limit records prunable at cutoff, reading from the key from (nil: the
// first) to the last and then from the first up to from; the key the next scan is to start from (nil once it read
// them all); and how many records it read. Each Prune scan starting where the last stopped, a backlog of dead
// tokens costs about one pass over the store however many batches it takes, where scans that each started at the
// first key would read the live tokens before it again for every batch.
func (s *BoltStore) pruneScan(ctx context.Context, from []byte, cutoff time.Time, limit int) (found []Hash, next []byte, read int, err error) {
	upTo := func(stop []byte) func(k []byte, r Record) bool {
		return func(k []byte, r Record) bool {
			if len(found) == limit || stop != nil && bytes.Compare(k, stop) >= 0 {
				return false
			}
			read++
			if r.prunable(cutoff) {
				found = append(found, Hash(k))
			}
			return true
		}
	}
	next, err = s.readRecords(ctx, from, upTo(nil))
	if err != nil || next != nil || from == nil {
		return found, next, read, err
	}
	// Round from the first key to where this scan began, for the tokens
	// that died there since the pass went by.
	next, err = s.readRecords(ctx, nil, upTo(from))
	if len(found) < limit {
		next = nil // stopped at from: every record was read
	}
	return found, next, read, err
}

// usageKeysOf returns the keys of b that hold token id's usage: id itself and id/DAY (UsageKey). Every token
// id has the same length, so no other token's key starts with id.
func usageKeysOf(b *bolt.Bucket, id string) [][]byte {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek([]byte(id)); k != nil && bytes.HasPrefix(k, []byte(id)); k, _ = c.Next() {
		if len(k) == len(id) || k[len(id)] == '/' {
			// A key is valid only within its transaction, and
			// deleting under a cursor moves it: collect, then delete.
			keys = append(keys, bytes.Clone(k))
		}
	}
	return keys
}

func (s *BoltStore) Prunable(ctx context.Context, cutoff time.Time, limit int) (int, []Record, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	n := 0
	var recs []Record
	_, err := s.readRecords(ctx, nil, func(_ []byte, r Record) bool {
		if r.prunable(cutoff) {
			n++
			if len(recs) < limit {
				recs = append(recs, r)
			}
		}
		return true
	})
	if err != nil {
		return 0, nil, fmt.Errorf("list prunable tokens: %w", err)
	}
	sortRecords(recs)
	return n, recs, nil
}

func pinKey(server, tool string) []byte { return []byte(server + "\x00" + tool) }

// MCPPins reads the pins in key order, which is server then tool.
func (s *BoltStore) MCPPins(ctx context.Context, server string) ([]MCPPin, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var pins []MCPPin
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketMCPPins).Cursor()
		var prefix []byte
		if server != "" {
			prefix = pinKey(server, "")
		}
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var p MCPPin
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("corrupt MCP pin: %w", err)
			}
			pins = append(pins, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list MCP pins: %w", err)
	}
	return pins, nil
}

func (s *BoltStore) MCPPin(ctx context.Context, server, tool string) (MCPPin, error) {
	if err := ctx.Err(); err != nil {
		return MCPPin{}, err
	}
	var p MCPPin
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMCPPins).Get(pinKey(server, tool))
		if v == nil {
			return ErrNotFound
		}
		return json.Unmarshal(v, &p)
	})
	return p, err
}

func (s *BoltStore) SeeMCPTool(ctx context.Context, server, tool, digest string, def []byte, at time.Time) (MCPPin, bool, error) {
	var newly bool
	p, err := s.updatePin(ctx, server, tool, see(digest, def, at, &newly))
	return p, newly, err
}

func (s *BoltStore) AcceptMCPPin(ctx context.Context, server, tool, digest string, at time.Time) (MCPPin, error) {
	return s.updatePin(ctx, server, tool, accept(digest, at))
}

func (s *BoltStore) RejectMCPPin(ctx context.Context, server, tool, digest string) (MCPPin, error) {
	return s.updatePin(ctx, server, tool, reject(digest))
}

// updatePin reads the pin, and writes it back when f changed it, in one
// transaction: first reading it alone, so that a list that changes nothing
// takes no write lock.
func (s *BoltStore) updatePin(ctx context.Context, server, tool string, f pinUpdate) (MCPPin, error) {
	if err := ctx.Err(); err != nil {
		return MCPPin{}, err
	}
	p, err := s.MCPPin(ctx, server, tool)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return MCPPin{}, err
	}
	p.Server, p.Tool = server, tool
	if write, ferr := f(&p, err == nil); ferr != nil || !write {
		return p, ferr
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMCPPins)
		p = MCPPin{Server: server, Tool: tool}
		v := b.Get(pinKey(server, tool))
		if v != nil {
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("corrupt MCP pin: %w", err)
			}
		}
		write, err := f(&p, v != nil)
		if err != nil || !write {
			return err
		}
		out, err := json.Marshal(p)
		if err != nil {
			return err
		}
		return b.Put(pinKey(server, tool), out)
	})
	return p, err
}

// RequestApproval looks for the live approval among every one kept: there
// are few (pruned with the tokens), and only a request that needs one asks.
func (s *BoltStore) RequestApproval(ctx context.Context, a Approval) (Approval, bool, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, false, err
	}
	if err := checkApproval(a); err != nil {
		return Approval{}, false, err
	}
	a.State, a.CreatedAt, a.ExpiresAt = ApprovalPending, a.CreatedAt.UTC(), a.ExpiresAt.UTC()
	out, created := a, false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketApprovals)
		found, err := findApproval(b, func(e Approval) bool {
			return e.Sandbox == a.Sandbox && e.Route == a.Route && e.Subject == a.Subject && e.live(a.CreatedAt)
		})
		if err != nil || found != nil {
			if found != nil {
				out = *found
			}
			return err
		}
		created = true
		return putApproval(b, a)
	})
	if err != nil {
		return Approval{}, false, fmt.Errorf("request approval: %w", err)
	}
	return out, created, nil
}

// eachApproval calls f with every approval in b, in id order, until f
// fails.
func eachApproval(b *bolt.Bucket, f func(Approval) error) error {
	return b.ForEach(func(_, v []byte) error {
		var a Approval
		if err := json.Unmarshal(v, &a); err != nil {
			return fmt.Errorf("corrupt approval: %w", err)
		}
		return f(a)
	})
}

// findApproval is the first approval in b that match takes; nil when
// none does.
func findApproval(b *bolt.Bucket, match func(Approval) bool) (*Approval, error) {
	var found *Approval
	err := eachApproval(b, func(a Approval) error {
		if match(a) {
			found = &a
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		err = nil
	}
	return found, err
}

func putApproval(b *bolt.Bucket, a Approval) error {
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return b.Put([]byte(a.ID), v)
}

// errFound ends a bucket's ForEach at what it looked for.
var errFound = errors.New("found")

func (s *BoltStore) Approval(ctx context.Context, id string) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, err
	}
	var a Approval
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketApprovals).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		return json.Unmarshal(v, &a)
	})
	return a, err
}

func (s *BoltStore) Approvals(ctx context.Context) ([]Approval, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Approval
	err := s.db.View(func(tx *bolt.Tx) error {
		return eachApproval(tx.Bucket(bucketApprovals), func(a Approval) error {
			out = append(out, a)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	sortApprovals(out)
	return out, nil
}

func (s *BoltStore) DecideApproval(ctx context.Context, id string, approve bool, by string, at time.Time, grant time.Duration) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, err
	}
	var a Approval
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketApprovals)
		v := b.Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		if err := json.Unmarshal(v, &a); err != nil {
			return fmt.Errorf("corrupt approval: %w", err)
		}
		if err := decideApproval(&a, approve, by, at, grant); err != nil {
			return err
		}
		return putApproval(b, a)
	})
	return a, err
}

func (s *BoltStore) UseGrant(ctx context.Context, sandbox, route, subject string, at time.Time) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, err
	}
	var a Approval
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketApprovals)
		found, err := findApproval(b, func(e Approval) bool {
			return e.Sandbox == sandbox && e.Route == route && e.Subject == subject && e.StateAt(at) == ApprovalApproved
		})
		switch {
		case err != nil:
			return err
		case found == nil:
			return ErrNoGrant
		}
		a = *found
		a.State, a.UsedAt = ApprovalUsed, at.UTC()
		return putApproval(b, a)
	})
	if err != nil {
		return Approval{}, err
	}
	return a, nil
}

// updateApprovals applies f to every approval in one transaction, writes
// back those it changed and deletes those it drops, and returns how many it
// changed or dropped.
func (s *BoltStore) updateApprovals(ctx context.Context, f func(a *Approval) (changed, drop bool)) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketApprovals)
		var put []Approval
		var dropped []string
		err := eachApproval(b, func(a Approval) error {
			changed, drop := f(&a)
			switch {
			case drop:
				dropped = append(dropped, a.ID)
			case changed:
				put = append(put, a)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, a := range put {
			if err := putApproval(b, a); err != nil {
				return err
			}
		}
		for _, id := range dropped {
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
		}
		n = len(put) + len(dropped)
		return nil
	})
	return n, err
}

func (s *BoltStore) PruneApprovals(ctx context.Context, cutoff time.Time) (int, error) {
	n, err := s.updateApprovals(ctx, func(a *Approval) (bool, bool) { return false, !a.DeadSince().After(cutoff) })
	if err != nil {
		return 0, fmt.Errorf("prune approvals: %w", err)
	}
	return n, nil
}

func (s *BoltStore) WithdrawApprovals(ctx context.Context, sandbox string, at time.Time) (int, error) {
	n, err := s.updateApprovals(ctx, func(a *Approval) (bool, bool) {
		if st := a.StateAt(at); a.Sandbox != sandbox || (st != ApprovalPending && st != ApprovalApproved) {
			return false, false
		}
		a.ExpiresAt = at.UTC()
		return true, false
	})
	if err != nil {
		return 0, fmt.Errorf("withdraw approvals: %w", err)
	}
	return n, nil
}
