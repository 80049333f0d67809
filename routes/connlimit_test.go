package routes

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Past the bound a connection is closed as soon as it is accepted; closing
// an accepted one (twice, even) frees exactly one place; refusals are
// logged once per interval with how many.
func TestConnLimit(t *testing.T) {
	var log strings.Builder
	l := &connLimit{max: 2, log: slog.New(slog.NewTextHandler(&log, nil))}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.limit(inner)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedByServer reports whether c was closed by the other end.
	closedByServer := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // ends a test that would hang
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF || err != nil && !isTimeout(err)
	}
	dial()
	dial()
	a, b := <-accepted, <-accepted
	for range 3 {
		if c := dial(); !closedByServer(c) {
			t.Fatal("a connection past the bound was kept")
		}
	}
	if n := l.open.Load(); n != 2 {
		t.Fatalf("%d open, want 2", n)
	}
	a.Close()
	a.Close()
	if n := l.open.Load(); n != 1 {
		t.Fatalf("%d open after one was closed twice, want 1", n)
	}
	dial()
	c := <-accepted
	if got := strings.Count(log.String(), "sandbox connections refused"); got != 1 || !strings.Contains(log.String(), "refused=1") {
		t.Errorf("three refusals within an interval logged as:\n%s", log.String())
	}
	b.Close()
	c.Close()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// The per-sandbox sockets share the bound with the proxy listener: with
// one connection open on the listener LimitConnections wraps, a sandbox's
// socket refuses the next, and serves it once that one closes.
func TestConnLimitCoversSandboxSockets(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, withPolicy(bindingPolicy), withSockets(t, dir), func(o *testOptions) { o.MaxConnections = 1 })
	_, out, _ := e.mint("sandbox=conv-1&bind=socket")
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := e.srv.LimitConnections(inner)
	defer ln.Close()
	// The one connection is counted once accepted, and its place is free
	// once the server has closed it, when the client has.
	accepted, closed := make(chan struct{}), make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		close(accepted)
		io.Copy(io.Discard, c)
		c.Close()
		close(closed)
	}()
	held, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	<-accepted
	c := socketClient(out.Socket)
	defer c.CloseIdleConnections()
	if _, err := c.Get("http://cproxy/v1/models"); err == nil {
		t.Fatal("a socket connection past the bound was served")
	}
	held.Close()
	<-closed
	if r := socketDo(t, out.Socket, out.Value); r.status != http.StatusOK {
		t.Errorf("the socket once a place is free: %d %s", r.status, r.body)
	}
}
