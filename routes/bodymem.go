package routes

import (
	"context"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/cproxy/cproxy/routes/metrics"
)

// Request bodies that cproxy reads whole to check them (a model request's
// JSON, an npm audit, a push's ref updates) stay in memory until the
// upstream has read them. Each is bounded on its own, but that does not
// bound their sum: 48 connections each sending a 32 MiB model body but its
// last byte would hold 1.5 GiB.
// bodyMemory bounds the sum, across every request of every sandbox, and
// what one sandbox's requests hold of it (its share), so that one sandbox
// cannot fill it and leave the others none. A body takes memory as its
// bytes arrive, never on what it declares: its buffer grows as it fills,
// each step at most what has arrived so far plus bodyStep. It gives it
// back once the upstream has read it or the request has ended.
type bodyMemory struct {
	sem   *semaphore.Weighted
	size  int64
	share int64         // what one sandbox's bodies may hold at once
	wait  time.Duration // bodyMemoryWait
	// held is what bodies hold now: the metric, and whether none is.
	held atomic.Int64
	// large is how much of what was given back since the runtime last
	// returned memory to the OS came from buffers too large to be lent
	// again (over maxBodyBufferShift), and garbage how much since the last
	// collection; returning marks a return or collection under way.
	large     atomic.Int64
	garbage   atomic.Int64
	returning atomic.Bool
	metrics   *metrics.Metrics

	mu sync.Mutex
	// shares are the sandboxes' shares, kept while none of their bodies
	// holds anything too (so that a sandbox's next request allocates
	// none), until there are more than sharesKept.
	shares map[string]*bodyShare
}

// bodyShare is one sandbox's share of bodyMemory.
type bodyShare struct {
	sem  *semaphore.Weighted
	refs int // holds using it, under bodyMemory.mu
}

// sharesKept is how many sandboxes' shares bodyMemory keeps before it
// drops those that hold nothing.
const sharesKept = 1024

// bodyMemoryWait is how long a body waits for its share before it is
// refused: long enough for a burst of large requests to pass one after
// another, short enough that a client is told to retry rather than hang.
const bodyMemoryWait = 5 * time.Second

// bodyMemoryRetry is the Retry-After of a request refused for memory.
const bodyMemoryRetry = 5 * time.Second

// bodyStep is the most a body holds beyond what has arrived of it, when
// little has: a body that declares 32 MiB and sends nothing holds 64 KiB,
// and a body read whole in one step (as every small model request is)
// holds its length. Past it a buffer doubles as it fills.
const bodyStep = 64 << 10

// heldReadStep is the least a body read by a route its own way
// (HeldReader) takes at a time: not a lock for every pkt-line.
const heldReadStep = 4 << 10

// returnAfter is how much memory from large buffers must have been given
// back, with no body held any more, before cproxy hands the memory to the
// OS at once rather than leaving it to Go's scavenger, which returns it
// over minutes, and only after a collection that an idle cproxy may not
// run for two: without this, eight 32 MiB bodies left cproxy at 281 MiB
// for over a minute after their clients had gone
// (TestBodyMemoryIsBounded); with it, back near the 23 MiB it started at.
const returnAfter = 64 << 20

// collectAfter is how much memory from large buffers must have been let go
// of while bodies are still held before cproxy has the runtime collect it
// (bodyMemory.dropped): what the heap may hold beyond what bodies do, left
// behind by buffers that grew, and by bodies refused or gone.
const collectAfter = 32 << 20

// defaultBodyMemory is Options.BodyMemory when it is zero: the config's
// runtime.body_memory_mib default (config.DefaultBodyMemoryMiB), which
// serve passes; a Server built in a test may leave it out.
const defaultBodyMemory = 256 << 20

// maxBody is the largest body a route reads whole (a model request), the
// least a sandbox's share may be.
const maxBody = 32 << 20

// BodyShare is what one sandbox's bodies may hold of size when no share is
// configured: a quarter of it, and at least the largest body (32 MiB), so
// that four sandboxes sending large bodies at once leave the others room,
// and the smallest memory still takes one largest body.
func BodyShare(size int64) int64 { return min(size, max(size/4, maxBody)) }

func newBodyMemory(size, share int64, m *metrics.Metrics) *bodyMemory {
	if share <= 0 || share > size {
		share = BodyShare(size)
	}
	return &bodyMemory{sem: semaphore.NewWeighted(size), size: size, share: share, wait: bodyMemoryWait, metrics: m,
		shares: map[string]*bodyShare{}}
}

// attach is sandbox's share, counted as used by one more hold.
func (m *bodyMemory) attach(sandbox string) *bodyShare {
	m.mu.Lock()
	defer m.mu.Unlock()
	sh := m.shares[sandbox]
	if sh == nil {
		if len(m.shares) >= sharesKept {
			for k, s := range m.shares {
				if s.refs == 0 {
					delete(m.shares, k)
				}
			}
		}
		sh = &bodyShare{sem: semaphore.NewWeighted(m.share)}
		m.shares[sandbox] = sh
	}
	sh.refs++
	return sh
}

func (m *bodyMemory) detach(sh *bodyShare) {
	m.mu.Lock()
	sh.refs--
	m.mu.Unlock()
}

// BodyHold is one request's share of bodyMemory, in its audit record:
// what a body holds is given back when the upstream has read it, and at
// the latest when the request ends. The zero hold of a nil bodyMemory
// holds nothing.
type BodyHold struct {
	m *bodyMemory
	// sandbox is whose share the hold counts against, set when the
	// request is authenticated; empty: none but the whole.
	sandbox string
	share   atomic.Pointer[bodyShare] // sandbox's, from the first grow
	n       atomic.Int64
	// large says the body's buffer is its own (not lent by bodyBuffers),
	// so that giving it back may return memory to the OS.
	large bool
}

// grow takes n more bytes for the body: of its sandbox's share first, then
// of the whole.
func (h *BodyHold) grow(ctx context.Context, n int64) error {
	m := h.m
	if n <= 0 || m == nil {
		return nil
	}
	total := h.n.Load() + n
	if total > m.size {
		return Refuse(ErrTooLarge, "a request body of %d bytes is over what cproxy may hold of all bodies at once (%d MiB, runtime.body_memory_mib); do not retry", total, m.size>>20)
	}
	sh := h.share.Load()
	if sh == nil && h.sandbox != "" {
		sh = m.attach(h.sandbox)
		h.share.Store(sh)
	}
	if sh != nil && total > m.share {
		return Refuse(ErrTooLarge, "a request body of %d bytes is over what one sandbox's bodies may hold at once (%d MiB, runtime.body_memory_sandbox_mib); do not retry", total, m.share>>20)
	}
	var wait context.Context
	cancel := func() {}
	defer func() { cancel() }()
	acquire := func(sem *semaphore.Weighted) bool {
		if sem.TryAcquire(n) {
			return true
		}
		if wait == nil {
			wait, cancel = context.WithTimeout(ctx, m.wait)
		}
		return sem.Acquire(wait, n) == nil
	}
	if sh != nil && !acquire(sh.sem) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return refuseRetry(ErrTooManyRequests, bodyMemoryRetry, "sandbox %s's requests are holding all the request body memory one sandbox may (%d MiB, runtime.body_memory_sandbox_mib); retry once they are done", h.sandbox, m.share>>20)
	}
	if !acquire(m.sem) {
		if sh != nil {
			sh.sem.Release(n)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.metrics.BodyMemoryRefused()
		return refuseRetry(ErrUnavailable, bodyMemoryRetry, "cproxy is holding all the request bodies it may at once (%d MiB, runtime.body_memory_mib); retry in a few seconds", m.size>>20)
	}
	h.n.Add(n)
	m.metrics.SetBodyMemory(m.held.Add(n))
	return nil
}

// shrink gives back n of what the body holds, from a buffer it no longer
// needs (large: one bodyBuffers does not lend again).
func (h *BodyHold) shrink(n int64, large bool) {
	if n <= 0 || h.m == nil {
		return
	}
	h.n.Add(-n)
	h.give(n, large)
}

// give returns n to the memory, and to the sandbox's share.
func (h *BodyHold) give(n int64, large bool) {
	m := h.m
	if sh := h.share.Load(); sh != nil {
		sh.sem.Release(n)
	}
	m.sem.Release(n)
	held := m.held.Add(-n)
	m.metrics.SetBodyMemory(held)
	if large {
		m.dropped(n)
	}
}

// dropped counts n bytes of a buffer too large to be lent again that no
// body holds any more. Once returnAfter of them have been dropped and no
// body is held, the runtime returns their memory to the OS; while bodies
// are held, it collects them every collectAfter: a buffer that grew as its body arrived leaves its smaller
// ones behind, as much again as the body, and without a collection the
// heap would grow by that much beyond what bodies hold
// (TestBodyMemoryIsBounded).
func (m *bodyMemory) dropped(n int64) {
	m.large.Add(n)
	m.garbage.Add(n)
	if m.due() && m.returning.CompareAndSwap(false, true) {
		// Off the request's goroutine: a collection takes milliseconds.
		go m.collect()
	}
}

// due says whether the runtime should return or collect memory now.
func (m *bodyMemory) due() bool {
	return m.large.Load() >= returnAfter && m.held.Load() == 0 || m.garbage.Load() >= collectAfter
}

// collect returns or collects memory until none is due; what is dropped
// while it runs is seen before it stops.
func (m *bodyMemory) collect() {
	for {
		switch {
		case m.large.Load() >= returnAfter && m.held.Load() == 0:
			m.large.Store(0)
			m.garbage.Store(0)
			debug.FreeOSMemory()
		case m.garbage.Load() >= collectAfter:
			m.garbage.Store(0)
			runtime.GC()
		default:
			m.returning.Store(false)
			if !m.due() || !m.returning.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

// release gives the body's share back; only the first call after a grow
// does anything.
func (h *BodyHold) release() {
	if h == nil {
		return
	}
	if n := h.n.Swap(0); n != 0 {
		h.give(n, h.large)
	}
	if sh := h.share.Swap(nil); sh != nil {
		h.m.detach(sh)
	}
}

// Reader is r with the body's share grown as its bytes are read: for a
// route that reads the part of a body it keeps its own way (a push's ref
// updates) within the memory bound of bodies read whole. What is read is
// held until the request ends, or until it has been forwarded (Replay);
// after StopHolding the rest streams on without a share. A read that
// cannot have its share fails with the refusal (Refused).
func (h *BodyHold) Reader(ctx context.Context, r io.Reader) *HeldReader {
	return &HeldReader{ctx: ctx, r: r, h: h}
}

// HeldReader is a body read under its request's BodyHold (BodyHold.Reader).
type HeldReader struct {
	ctx  context.Context
	r    io.Reader
	h    *BodyHold
	read int64
	held int64 // what it took of h: read, and at most a step more
	// stopped: what is read now streams on, and takes no more share.
	stopped bool
	refused error
}

// StopHolding lets the rest of the body be read without taking a share:
// it is streamed, not kept. What was taken ahead of the bytes read is
// given back.
func (hr *HeldReader) StopHolding() {
	if !hr.stopped {
		hr.stopped = true
		hr.h.shrink(hr.held-hr.read, false)
		hr.held = hr.read
	}
}

// Refused is why a read could not have its share (a refusal to answer
// with), or nil: for a caller that reads through a parser that words its
// own errors.
func (hr *HeldReader) Refused() error { return hr.refused }

// Replay is the body to forward, r, which yields first the bytes hr has
// kept, then the rest: what hr holds is given back once r has yielded as
// many bytes as hr kept. It stops holding.
func (hr *HeldReader) Replay(r io.Reader) io.Reader {
	hr.StopHolding()
	return &replayed{r: r, left: hr.held, hr: hr}
}

type replayed struct {
	r    io.Reader
	left int64
	hr   *HeldReader
}

func (rp *replayed) Read(p []byte) (int, error) {
	n, err := rp.r.Read(p)
	if rp.hr != nil {
		if rp.left -= int64(n); rp.left <= 0 {
			rp.hr.h.shrink(rp.hr.held, false)
			rp.hr.held, rp.hr = 0, nil
		}
	}
	return n, err
}

func (hr *HeldReader) Read(p []byte) (int, error) {
	if !hr.stopped {
		if avail := hr.held - hr.read; int64(len(p)) > avail {
			// At most what has arrived (or bodyStep) more at a time.
			step := min(max(int64(len(p))-avail, heldReadStep), max(hr.read, bodyStep))
			if err := hr.h.grow(hr.ctx, step); err != nil {
				hr.refused = err
				return 0, err
			}
			hr.held += step
			avail += step
			p = p[:min(int64(len(p)), avail)]
		}
	}
	n, err := hr.r.Read(p)
	hr.read += int64(n)
	return n, err
}
