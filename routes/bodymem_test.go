package routes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Bodies take their share before they are kept and give it back once;
// what is past the memory waits, then is refused with a 503 that says when
// to retry; a body read as it arrives takes its share as it grows, and
// none for what streams on after StopHolding.
func TestBodyMemory(t *testing.T) {
	m := newBodyMemory(4<<20, 0, nil)
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

// One sandbox's bodies hold at most its share: past it the sandbox waits,
// then is told 429 with a retry time naming runtime.body_memory_sandbox_mib,
// while another sandbox still has the rest; a body larger than a share is
// 413. The share comes back with the release.
func TestBodyMemoryShare(t *testing.T) {
	m := newBodyMemory(64<<20, 0, nil)
	m.wait = time.Millisecond
	if m.share != 32<<20 {
		t.Fatalf("the share of 64 MiB is %d MiB, want 32 (a quarter, at least the largest body)", m.share>>20)
	}
	if got := BodyShare(256 << 20); got != 64<<20 {
		t.Errorf("the share of 256 MiB is %d MiB, want 64", got>>20)
	}
	ctx := context.Background()
	a1, a2 := &BodyHold{m: m, sandbox: "conv-1"}, &BodyHold{m: m, sandbox: "conv-1"}
	if err := a1.grow(ctx, 20<<20); err != nil {
		t.Fatal(err)
	}
	err := a2.grow(ctx, 20<<20)
	var ref *refusal
	if !errors.As(err, &ref) || !errors.Is(err, ErrTooManyRequests) || ref.retryAfter <= 0 ||
		!strings.Contains(err.Error(), "runtime.body_memory_sandbox_mib") || !strings.Contains(err.Error(), "sandbox conv-1") {
		t.Fatalf("a sandbox past its share: %v, want a 429 refusal with a retry time naming the key", err)
	}
	if err := a2.grow(ctx, 33<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a body larger than a share: %v, want 413", err)
	}
	b := &BodyHold{m: m, sandbox: "conv-2"}
	if err := b.grow(ctx, 30<<20); err != nil {
		t.Fatalf("another sandbox beside one at its share: %v", err)
	}
	a1.release()
	if err := a2.grow(ctx, 20<<20); err != nil {
		t.Fatalf("the sandbox once its share is back: %v", err)
	}
	a2.release()
	b.release()
	if m.held.Load() != 0 || m.shares["conv-1"].refs != 0 {
		t.Errorf("held %d, conv-1's share used by %d holds after every release", m.held.Load(), m.shares["conv-1"].refs)
	}
}

// A body takes memory as its bytes arrive, not on what it declares: one
// that declares 32 MiB and sends 10 bytes holds bodyStep; one that sends
// all of its 5 MiB holds exactly that; the memory comes back when it ends.
func TestBodyMemoryAsBytesArrive(t *testing.T) {
	m := newBodyMemory(64<<20, 0, nil)
	for _, tc := range []struct {
		declared int64
		sent     int
		want     int64 // held before the body ends
	}{
		{32 << 20, 10, bodyStep},
		{-1, 10, bodyStep},
		{100, 10, 100},
		{5 << 20, 5<<20 - 1, 5 << 20},
		{-1, 5<<20 - 1, 8 << 20},
	} {
		pr, pw := io.Pipe()
		r, _ := http.NewRequest("POST", "/", pr)
		r.ContentLength = tc.declared
		h := &BodyHold{m: m, sandbox: "conv-1"}
		done := make(chan error, 1)
		go func() { _, err := readBody(r, 32<<20, h); done <- err }()
		pw.Write(make([]byte, tc.sent))
		for deadline := time.Now().Add(5 * time.Second); h.n.Load() < min(tc.want, int64(tc.sent)); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("declared %d, sent %d: never held", tc.declared, tc.sent)
			}
		}
		if got := h.n.Load(); got != tc.want {
			t.Errorf("declared %d, sent %d: holds %d bytes, want %d", tc.declared, tc.sent, got, tc.want)
		}
		pw.CloseWithError(io.ErrUnexpectedEOF)
		if err := <-done; err == nil {
			t.Errorf("declared %d, sent %d: a body cut short was read", tc.declared, tc.sent)
		}
		h.release()
	}
	if m.held.Load() != 0 {
		t.Errorf("held %d after every release", m.held.Load())
	}
}

// A body read by a route its own way takes small steps for small reads,
// gives back what it took ahead when it stops holding, and the rest once
// what it kept has been forwarded.
func TestHeldReaderSteps(t *testing.T) {
	m := newBodyMemory(64<<20, 0, nil)
	h := &BodyHold{m: m, sandbox: "conv-1"}
	kept := []byte("0024abcdefghijklmnopqrstuvwxyz\n")
	hr := h.Reader(context.Background(), io.MultiReader(bytes.NewReader(kept), strings.NewReader("PACK...")))
	if _, err := io.ReadFull(hr, make([]byte, len(kept))); err != nil {
		t.Fatal(err)
	}
	if n := h.n.Load(); n > heldReadStep {
		t.Errorf("holding %d bytes for %d read", n, len(kept))
	}
	fwd := hr.Replay(io.MultiReader(bytes.NewReader(kept), hr))
	if n := h.n.Load(); n != int64(len(kept)) {
		t.Errorf("holding %d bytes once it stopped holding, want the %d kept", n, len(kept))
	}
	if _, err := io.ReadFull(fwd, make([]byte, len(kept))); err != nil {
		t.Fatal(err)
	}
	if n := h.n.Load(); n != 0 {
		t.Errorf("holding %d bytes once what was kept was forwarded", n)
	}
	if b, _ := io.ReadAll(fwd); string(b) != "PACK..." {
		t.Errorf("the rest: %q", b)
	}
	h.release()
	if m.held.Load() != 0 {
		t.Errorf("held %d after the release", m.held.Load())
	}
}
