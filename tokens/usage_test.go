package tokens

import (
	"context"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestUsagePersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cproxy.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if u, err := s.LoadUsage(ctx, "tok_000000000001"); err != nil || u != (Usage{}) {
		t.Fatalf("no usage yet: %+v, %v", u, err)
	}
	want := Usage{Requests: 3, Input: 100, Output: 42, CacheRead: 7, CacheWrite: 9}
	key := UsageKey("tok_000000000001", "2026-11-30")
	if key != "tok_000000000001/2026-11-30" {
		t.Errorf("key %q", key)
	}
	if err := s.SaveUsage(ctx, key, want); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if u, err := s.LoadUsage(ctx, key); err != nil || u != want {
		t.Errorf("after reopening: %+v, %v; want %+v", u, err, want)
	}
	if got := want.Add(want).Sub(want); got != want {
		t.Errorf("Add/Sub: %+v", got)
	}
}

// A store from before usage was kept (schema 2) gains the usage bucket
// when it is opened.
func TestUsageUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		tx.DeleteBucket(bucketUsage)
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("2"))
	})
	db.Close()
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatalf("opening a schema 2 store: %v", err)
	}
	defer s.Close()
	if err := s.SaveUsage(context.Background(), "tok_000000000002", Usage{Requests: 1}); err != nil {
		t.Errorf("saving usage in an upgraded store: %v", err)
	}
}

// A window's usage saved before MCP tool calls were counted (JSON without
// mcp_calls) reads as having made none, and counts them from then on.
func TestUsageBeforeMCPCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cproxy.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := UsageKey("tok_000000000003", "")
	old := `{"requests":3,"input_tokens":100,"output_tokens":42,"cache_read_tokens":7,"cache_write_tokens":9}`
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketUsage).Put([]byte(key), []byte(old)) }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	u, err := s.LoadUsage(ctx, key)
	if want := (Usage{Requests: 3, Input: 100, Output: 42, CacheRead: 7, CacheWrite: 9}); err != nil || u != want {
		t.Fatalf("an old record = %+v, %v; want %+v", u, err, want)
	}
	u.MCPCalls = 2
	if err := s.SaveUsage(ctx, key, u); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LoadUsage(ctx, key); err != nil || got != u {
		t.Errorf("after saving MCP calls: %+v, %v; want %+v", got, err, u)
	}
}
