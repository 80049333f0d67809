package budget

import (
	"container/list"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cproxy/cproxy/routes/metrics"
)

// ConnLimit bounds the connections the sandboxes hold open at once, on the
// proxy listener and every per-sandbox socket together. The admin listener
// and the upstream connections share the process's file descriptors with
// them: without a bound, a sandbox holding hundreds of streams open took
// every descriptor, and the harness could not even revoke its tokens. Past
// the bound a new connection is closed as soon as it is accepted (the
// client sees it closed before any answer), counted, and logged at most
// once per connLogEvery.
//
// A connection that has not yet brought a live token (Authenticated) holds
// its place for UnauthenticatedTimeout at most, and is the first to go: a
// new connection that finds every place taken closes the oldest of them
// instead of being refused. So idle connections without a token cannot
// keep a sandbox with one out. One token's connections may hold half the
// places at most (TokenShare): its next is answered 429 and closed.
type ConnLimit struct {
	max     int64
	open    atomic.Int64
	log     *slog.Logger
	metrics *metrics.Metrics

	mu       sync.Mutex
	refused  connLog          // connections refused
	evicted  connLog          // connections without a token closed for a new one
	pending  list.List        // of *limitedConn not yet authenticated, oldest first
	perToken map[string]int64 // authenticated connections by token id
}

// UnauthenticatedTimeout is how long a connection may stay open without
// a request bringing a live token: its reads end then, and it is closed.
var UnauthenticatedTimeout = 10 * time.Second

// TokenShare is how many connections one token may hold at once.
func (l *ConnLimit) TokenShare() int64 { return max(l.max/2, 1) }

// connLogEvery is how often, at most, refused connections are logged: a
// flood of them is one line per interval, with how many.
const connLogEvery = 10 * time.Second

// NewConnLimit is the bound of limit connections open at once; refusals
// are logged to log and counted in m (nil: not counted).
func NewConnLimit(limit int64, log *slog.Logger, m *metrics.Metrics) *ConnLimit {
	return &ConnLimit{max: limit, log: log, metrics: m, perToken: map[string]int64{}}
}

// Listener returns ln with its accepted connections counted against l; a
// nil l (no bound) returns ln.
func (l *ConnLimit) Listener(ln net.Listener) net.Listener {
	if l == nil {
		return ln
	}
	return &limitedListener{Listener: ln, l: l}
}

type limitedListener struct {
	net.Listener
	l *ConnLimit
}

func (ln *limitedListener) Accept() (net.Conn, error) {
	l := ln.l
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Load() >= l.max {
			l.evictPending()
		}
		if n := l.open.Add(1); n <= l.max {
			l.metrics.SetConnections(n)
			lc := &limitedConn{Conn: c, l: l, authBy: time.Now().Add(UnauthenticatedTimeout)}
			c.SetReadDeadline(lc.authBy)
			l.mu.Lock()
			lc.pending = l.pending.PushBack(lc)
			l.mu.Unlock()
			return lc, nil
		}
		l.open.Add(-1)
		c.Close()
		l.refuse()
	}
}

// connLog counts what is logged at most once per connLogEvery.
type connLog struct {
	n      int64     // since the last log line
	logged time.Time // when the last line was written
}

// count counts one and reports how many to log now, with this one: 0
// within the interval. The caller holds l.mu.
func (cl *connLog) count(now time.Time) int64 {
	cl.n++
	if now.Sub(cl.logged) < connLogEvery {
		return 0
	}
	n := cl.n
	cl.n, cl.logged = 0, now
	return n
}

func (l *ConnLimit) refuse() {
	l.metrics.ConnectionRefused()
	l.mu.Lock()
	n := l.refused.count(time.Now())
	l.mu.Unlock()
	if n > 0 {
		// refused counts this one and those since the last such line.
		l.log.Warn("sandbox connections refused: as many are open as runtime.max_connections allows",
			"max_connections", l.max, "refused", n)
	}
}

// evictPending closes the oldest connection that has not authenticated,
// if there is one, to make room for a new one.
func (l *ConnLimit) evictPending() {
	l.mu.Lock()
	e := l.pending.Front()
	n := int64(0)
	if e != nil {
		n = l.evicted.count(time.Now())
	}
	l.mu.Unlock()
	if e == nil {
		return
	}
	e.Value.(*limitedConn).Close()
	l.metrics.ConnectionRefused()
	if n > 0 {
		l.log.Warn("sandbox connections without a token closed to make room: as many are open as runtime.max_connections allows",
			"max_connections", l.max, "closed", n)
	}
}

// limitedConn gives its place back when it is closed, once.
type limitedConn struct {
	net.Conn
	l      *ConnLimit
	closed atomic.Bool
	token  atomic.Pointer[string] // the token whose connection it is; nil: none yet

	mu      sync.Mutex    // guards what follows
	pending *list.Element // in l.pending; nil once authenticated or closed
	authBy  time.Time     // unauthenticated: its reads end then
	want    time.Time     // the read deadline net/http last asked for
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		l := c.l
		l.mu.Lock()
		c.mu.Lock()
		if c.pending != nil {
			l.pending.Remove(c.pending)
			c.pending = nil
		}
		c.mu.Unlock()
		if id := c.token.Load(); id != nil {
			if l.perToken[*id]--; l.perToken[*id] <= 0 {
				delete(l.perToken, *id)
			}
		}
		l.mu.Unlock()
		l.metrics.SetConnections(l.open.Add(-1))
	}
	return c.Conn.Close()
}

// SetReadDeadline is the connection's, but no later than its authBy while
// it has not authenticated.
func (c *limitedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = t
	if c.pending != nil && (t.IsZero() || t.After(c.authBy)) {
		t = c.authBy
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *limitedConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

type connKey struct{}

// ConnContext is http.Server's ConnContext for the listeners l bounds: it
// keeps the connection in the requests' context, for Authenticated.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// TooManyConnections is the refusal of a request on a connection over its
// token's share of the connections.
type TooManyConnections struct{ Share, Max int64 }

func (e *TooManyConnections) Error() string {
	return fmt.Sprintf("this sandbox token holds %d connections to cproxy, its share of the %d (runtime.max_connections) all sandboxes share; reuse or close one (this one is closed)", e.Share, e.Max)
}

// Authenticated records that a request on the connection in ctx (from
// ConnContext) brought token id, live: the connection is no longer
// counted as without a token and keeps its reads' deadlines, and counts
// against id's share. A connection past id's share gets a
// *TooManyConnections, and should be closed.
func Authenticated(ctx context.Context, id string) error {
	c, _ := ctx.Value(connKey{}).(*limitedConn)
	if c == nil {
		return nil
	}
	if p := c.token.Load(); p != nil && *p == id {
		return nil // the usual case: its own token again
	}
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	old := c.token.Load()
	if l.perToken[id] >= l.TokenShare() {
		return &TooManyConnections{Share: l.TokenShare(), Max: l.max}
	}
	if old != nil {
		if l.perToken[*old]--; l.perToken[*old] <= 0 {
			delete(l.perToken, *old)
		}
	}
	l.perToken[id]++
	c.token.Store(&id)
	c.mu.Lock()
	if c.pending != nil {
		l.pending.Remove(c.pending)
		c.pending = nil
		c.Conn.SetReadDeadline(c.want)
	}
	c.mu.Unlock()
	return nil
}

// CloseWrite lets net/http end a response it did not read the request of
// gracefully (a FIN, then a pause before the close), as on the bare
// connection: without it the client can get a reset instead of the answer.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the connection's own (splice, sendfile) where it has one.
func (c *limitedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r) // the Writer alone: not this ReadFrom again
}
