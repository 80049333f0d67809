package main

// cproxy's memory does not grow with its store, through the real `cproxy
// serve`: the admin calls that go over every token take it a page at a
// time.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/tokens"
)

const (
	// storeTokens is how many tokens the large store holds: enough that
	// holding them all at once would be tens of MiB.
	storeTokens = 20_000
	// bigSandbox is the one sandbox of the large store with many tokens.
	bigSandbox, bigSandboxTokens = "big", 5000
	// storeMemorySlack is how much more heap the large store's cproxy may
	// hold than the empty store's after the same admin calls: a page or a
	// batch of revocations and the Go runtime's rounding, some 2 MiB, not
	// the store. Answering every token at once took 23 MiB more, and
	// revoking the big sandbox in one transaction 20 MiB.
	storeMemorySlack = 8 << 20
)

// fillStore writes n tokens, token(i) for each i, into a new embedded
// store at path in one transaction, before serve opens it.
func fillStore(path string, n int, token func(i int) (tokens.Hash, tokens.Record)) error {
	s, err := tokens.OpenBolt(path)
	if err != nil {
		return err
	}
	recs := make(map[tokens.Hash]tokens.Record, n)
	for i := range n {
		h, r := token(i)
		recs[h] = r
	}
	err = s.CreateAll(context.Background(), recs)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// largeStoreToken is token i of the large store: bigSandboxTokens in
// bigSandbox, the rest in sandboxes of ten, a third of those revoked and
// a third expired.
func largeStoreToken(now time.Time) func(i int) (tokens.Hash, tokens.Record) {
	return func(i int) (tokens.Hash, tokens.Record) {
		var h tokens.Hash
		rand.Read(h[:])
		r := tokens.Record{Sandbox: fmt.Sprintf("conv-%d", i/10), Profile: "default", CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}
		switch {
		case i < bigSandboxTokens:
			r.Sandbox = bigSandbox
		case i%3 == 1:
			r.RevokedAt = now.Add(-time.Minute)
		case i%3 == 2:
			r.ExpiresAt = now.Add(-time.Minute)
		}
		return h, r
	}
}

// listEvery pages through GET /tokens with query q, following next, and
// returns how many tokens it saw, failing the test on a token seen twice.
func listEvery(t *testing.T, s *served, q url.Values) int {
	t.Helper()
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		resp, err := http.Get(s.admin + "/tokens?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Tokens []struct{ ID string }
			Next   string
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("GET /tokens?%s: %s, %v", q.Encode(), resp.Status, err)
		}
		for _, tok := range page.Tokens {
			if seen[tok.ID] {
				t.Fatalf("GET /tokens?%s listed %s twice", q.Encode(), tok.ID)
			}
			seen[tok.ID] = true
		}
		if page.Next == "" {
			return len(seen)
		}
		q.Set("cursor", page.Next)
	}
}

// The heap cproxy holds after listing every token (at the default page
// size and the largest), revoking a sandbox of 5,000 tokens and counting
// the tokens for /metrics, is about the same with 20,000 tokens in its
// store as with none.
func TestAdminMemoryDoesNotGrowWithTheStore(t *testing.T) {
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	checkAdminMemory(t, func(n int) *served {
		dir := t.TempDir()
		writeServeConfig(t, dir, fake.URL)
		if err := fillStore(filepath.Join(dir, "cproxy.db"), n, largeStoreToken(time.Now().UTC())); err != nil {
			t.Fatal(err)
		}
		return startServe(t, dir)
	})
}

// The same with the store on PostgreSQL.
func TestAdminMemoryDoesNotGrowWithTheStorePostgres(t *testing.T) {
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	checkAdminMemory(t, func(n int) *served {
		dsn := pgTestDatabase(t)
		store, err := tokens.OpenPostgres(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		// Eight at a time, as several replicas would mint them.
		token, next := largeStoreToken(time.Now().UTC()), make(chan int)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := range next {
					if h, r := token(i); store.Create(t.Context(), h, r) != nil {
						t.Errorf("creating token %d failed", i)
					}
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		t.Setenv("CPROXY_PG_DSN", dsn)
		return startReplica(t, fake.URL)
	})
}

// checkAdminMemory starts cproxy with an empty store and with one of
// storeTokens (start(n) fills the store with n tokens of largeStoreToken's
// and starts serve on it), makes the same admin calls to each, and fails
// the test if the large store's cproxy holds more than storeMemorySlack
// more heap for them.
func checkAdminMemory(t *testing.T, start func(n int) *served) {
	held := map[int]int64{}
	for _, n := range []int{0, storeTokens} {
		s := start(n)
		if got := listEvery(t, s, url.Values{}); got != n {
			t.Fatalf("GET /tokens, page after page, listed %d tokens of %d", got, n)
		}
		peak := boundsHeld(t, s) // and /metrics counts the tokens by state
		if got := listEvery(t, s, url.Values{"limit": {"1000"}, "state": {"live"}}); n > 0 && got == 0 {
			t.Fatal("GET /tokens?state=live listed no token")
		}
		s.revoke(bigSandbox)
		if got := listEvery(t, s, url.Values{"sandbox": {bigSandbox}, "state": {"revoked"}}); n > 0 && got != bigSandboxTokens {
			t.Fatalf("the big sandbox has %d revoked tokens, want %d", got, bigSandboxTokens)
		}
		held[n] = max(peak, boundsHeld(t, s))
	}
	t.Logf("heap held: %d MiB with an empty store, %d MiB with %d tokens", held[0]>>20, held[storeTokens]>>20, storeTokens)
	if held[storeTokens] > held[0]+storeMemorySlack {
		t.Errorf("with %d tokens in the store, cproxy held %d MiB after the admin calls; with none, %d MiB", storeTokens, held[storeTokens]>>20, held[0]>>20)
	}
}
