package budget

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// Past the bound, every place held by a connection with a token, a new
// connection is closed as soon as it is accepted; closing
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
	// Both with a token: no new connection closes them to make room.
	for i, c := range []net.Conn{a, b} {
		if err := Authenticated(ConnContext(context.Background(), c), fmt.Sprint("tok-", i)); err != nil {
			t.Fatal(err)
		}
	}
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

// A connection without a token gives its place to a new one, and one
// token holds half the places at most.
func TestConnLimitTokenlessAndShare(t *testing.T) {
	l := NewConnLimit(2, slog.New(slog.DiscardHandler), nil)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listener(inner)
	defer ln.Close()
	accept := func() net.Conn {
		d, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first := accept()
	accept()
	third := accept() // the first, without a token, made room
	if n := l.open.Load(); n != 2 {
		t.Fatalf("%d open, want 2", n)
	}
	if _, err := first.Read(make([]byte, 1)); err == nil {
		t.Fatal("the oldest connection without a token was kept")
	}
	if err := Authenticated(ConnContext(context.Background(), third), "tok"); err != nil {
		t.Fatal(err)
	}
	fourth := accept()
	if err := Authenticated(ConnContext(context.Background(), fourth), "tok"); err == nil {
		t.Fatal("one token held every place")
	}
	if err := Authenticated(ConnContext(context.Background(), fourth), "other"); err != nil {
		t.Fatalf("another token: %v", err)
	}
}
