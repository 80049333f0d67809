package routes

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
)

// The per-sandbox sockets share the bound with the proxy listener: with
// one connection without a token open on the listener LimitConnections
// wraps, a sandbox's socket connection takes its place: it is served, and
// the other is closed.
func TestConnLimitCoversSandboxSockets(t *testing.T) {
	dir := testutil.SocketDir(t)
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
	defer held.Close()
	if r := socketDo(t, out.Socket, out.Value); r.status != http.StatusOK {
		t.Errorf("the socket past the bound: %d %s", r.status, r.body)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection without a token was kept when the socket's took its place")
	}
}
