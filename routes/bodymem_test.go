package routes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// Bodies take their share before they are kept and give it back once;
// what is past the memory waits, then is refused with a 503 that says when
// to retry; a body read as it arrives takes its share as it grows, and
// none for what streams on after StopHolding.
func TestBodyMemory(t *testing.T) {
	m := newBodyMemory(4<<20, nil)
	m.wait = time.Millisecond // refused at once, rather than after a wait
	ctx := context.Background()
	a, b := &BodyHold{m: m}, &BodyHold{m: m}
	if err := a.grow(ctx, 3<<20); err != nil {
		t.Fatal(err)
	}
	err := b.grow(ctx, 2<<20)
	var ref *refusal
	if !errors.As(err, &ref) || !errors.Is(err, ErrUnavailable) || ref.retryAfter <= 0 || !strings.Contains(err.Error(), "runtime.body_memory_mib") {
		t.Fatalf("a body past the memory: %v, want a 503 refusal with a retry time", err)
	}
	if err := b.grow(ctx, 5<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a body larger than all the memory: %v, want 413 (retrying cannot help)", err)
	}
	a.release()
	a.release() // a second release gives nothing back twice
	if m.held.Load() != 0 {
		t.Fatalf("held %d after the release", m.held.Load())
	}
	if err := b.grow(ctx, 4<<20); err != nil {
		t.Fatalf("the whole memory once it is free: %v", err)
	}
	b.release()

	// Read as it arrives: 3 MiB kept, then 8 MiB streamed on unheld.
	h := &BodyHold{m: m}
	src := io.MultiReader(bytes.NewReader(make([]byte, 3<<20)), bytes.NewReader(make([]byte, 8<<20)))
	hr := h.Reader(ctx, src)
	if _, err := io.ReadFull(hr, make([]byte, 3<<20)); err != nil {
		t.Fatal(err)
	}
	if n := h.n.Load(); n < 3<<20 || n > 4<<20 {
		t.Errorf("holding %d bytes for 3 MiB read", n)
	}
	hr.StopHolding()
	if n, err := io.Copy(io.Discard, hr); n != 8<<20 || err != nil {
		t.Fatalf("the streamed rest: %d bytes, %v", n, err)
	}
	h.release()

	// Past the memory while reading: the read fails with the refusal.
	h = &BodyHold{m: m}
	hr = h.Reader(ctx, bytes.NewReader(make([]byte, 5<<20)))
	if _, err := io.ReadAll(hr); !errors.As(err, &ref) || hr.Refused() == nil {
		t.Errorf("a body of undeclared length past the memory: %v", err)
	}
	h.release()
	if m.held.Load() != 0 {
		t.Errorf("held %d after every release", m.held.Load())
	}
}
