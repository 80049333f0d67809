package budget

import (
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
type ConnLimit struct {
	max     int64
	open    atomic.Int64
	log     *slog.Logger
	metrics *metrics.Metrics

	mu      sync.Mutex
	refused int64     // since the last log line
	logged  time.Time // when the last line was written
}

// connLogEvery is how often, at most, refused connections are logged: a
// flood of them is one line per interval, with how many.
const connLogEvery = 10 * time.Second

// NewConnLimit is the bound of limit connections open at once; refusals
// are logged to log and counted in m (nil: not counted).
func NewConnLimit(limit int64, log *slog.Logger, m *metrics.Metrics) *ConnLimit {
	return &ConnLimit{max: limit, log: log, metrics: m}
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
		if n := l.open.Add(1); n <= l.max {
			l.metrics.SetConnections(n)
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		c.Close()
		l.refuse()
	}
}

func (l *ConnLimit) refuse() {
	l.metrics.ConnectionRefused()
	now := time.Now()
	l.mu.Lock()
	l.refused++
	if now.Sub(l.logged) < connLogEvery {
		l.mu.Unlock()
		return
	}
	n := l.refused
	l.refused, l.logged = 0, now
	l.mu.Unlock()
	// refused counts this one and those since the last such line.
	l.log.Warn("sandbox connections refused: as many are open as runtime.max_connections allows",
		"max_connections", l.max, "refused", n)
}

// limitedConn gives its place back when it is closed, once.
type limitedConn struct {
	net.Conn
	l      *ConnLimit
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.metrics.SetConnections(c.l.open.Add(-1))
	}
	return c.Conn.Close()
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
