package tokens

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// relay forwards TCP connections to a server, and can freeze: every byte in
// either direction then waits, and new connections are accepted but not
// forwarded, as in a network partition, where nothing is closed and nothing
// arrives.
type relay struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed when a freeze ends
	conns  []net.Conn
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, thawed: make(chan struct{})}
	close(r.thawed)
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
		if r.frozen {
			close(r.thawed)
		}
	})
	go r.accept()
	return r
}

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			r.wait()
			s, err := net.Dial("tcp", r.target)
			if err != nil {
				c.Close()
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, s)
			r.mu.Unlock()
			go r.pipe(s, c)
			r.pipe(c, s)
		}()
	}
}

// pipe copies from src to dst, holding each chunk while the relay is frozen.
func (r *relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (r *relay) wait() {
	r.mu.Lock()
	ch := r.thawed
	r.mu.Unlock()
	<-ch
}

func (r *relay) freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frozen, r.thawed = true, make(chan struct{})
}

func (r *relay) thaw() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frozen = false
	close(r.thawed)
}

// A partition between a cached replica and the database, where nothing is
// closed: the replica's listener hears nothing, so a revocation made through
// another replica meanwhile cannot reach its cache. Within two heartbeats
// the listener gives up, the cache is bypassed, and the replica's look-ups
// fail (they cannot reach the database) instead of serving the revoked
// token from memory; once the partition heals, the revocation holds there.
func TestPostgresCachePartition(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the heartbeat to give up")
	}
	dsn := NewTestDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	rl := newRelay(t, u.Host)
	u.Host = rl.ln.Addr().String()
	c, _ := openCache(t, u.String(), time.Hour)
	other := openPG(t, dsn)
	h := issue(t, other, "conv-1", t0)
	if _, err := c.Lookup(ctx, h); err != nil {
		t.Fatal(err)
	}

	rl.freeze()
	if _, err := other.RevokeSandbox(ctx, "conv-1", t0); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		r, err := lookupWithin(c, h, 200*time.Millisecond)
		if err != nil {
			break // the cache is bypassed and the database unreachable: refused
		}
		if !r.RevokedAt.IsZero() {
			t.Fatal("a revoked record came through a frozen relay")
		}
		if d := time.Since(revoked); d > 2*listenHeartbeat+4*time.Second {
			t.Fatalf("the revoked token was still served from the cache %v into the partition", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("in a partition, the cache served the revoked token for %v, then look-ups failed", time.Since(revoked).Round(time.Millisecond))

	rl.thaw()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := lookupWithin(c, h, time.Second)
		if err == nil && !r.RevokedAt.IsZero() {
			break
		}
		if err == nil {
			t.Fatal("after the partition healed the revoked token looked live")
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the partition healed, look-ups still fail: %v", err)
		}
	}
}

func lookupWithin(c *PostgresCache, h Hash, d time.Duration) (Record, error) {
	cx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.Lookup(cx, h)
}
