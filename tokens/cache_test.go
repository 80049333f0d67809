package tokens

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Look-ups are served from memory, and a revocation is in force for every
// look-up that starts after RevokeSandbox returns, however many look-ups of
// the same token race with it.
func TestCachedLookupSeesRevocation(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	for round := range 20 {
		tok, _ := New()
		h := tok.Hash()
		if err := s.Create(ctx, h, Record{Sandbox: "conv-1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Lookup(ctx, h); err != nil { // now cached
			t.Fatal(err)
		}
		var revokedDone atomic.Bool
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := revokedDone.Load()
					r, err := s.Lookup(ctx, h)
					if err != nil {
						t.Error(err)
						return
					}
					if after && !errors.Is(r.Check(now), ErrRevoked) {
						t.Errorf("round %d: a look-up after the revocation returned a live token", round)
						return
					}
				}
			})
		}
		time.Sleep(time.Millisecond)
		if _, err := s.RevokeSandbox(ctx, "conv-1", now); err != nil {
			t.Fatal(err)
		}
		revokedDone.Store(true)
		time.Sleep(time.Millisecond)
		close(stop)
		wg.Wait()
	}
}
