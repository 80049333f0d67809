package budget

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// Past the bound a connection is closed as soon as it is accepted; closing
// an accepted one (twice, even) frees exactly one place; refusals are
// logged once per interval with how many.
func TestConnLimit(t *testing.T) {
	var log strings.Builder
	l := NewConnLimit(2, slog.New(slog.NewTextHandler(&log, nil)), nil)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listener(inner)
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
