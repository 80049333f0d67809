package routes

import (
	"context"
	"io"
	"runtime/debug"
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
// bodyMemory bounds the sum, across every request of every sandbox: a
// body takes its share (its declared length, or what it has sent so far
// when it declared none) before its buffer is allocated, and gives it back
// once the upstream has read it or the request has ended.
type bodyMemory struct {
	sem  *semaphore.Weighted
	size int64
	wait time.Duration // bodyMemoryWait
	// held is what bodies hold now: the metric, and whether none is.
	held atomic.Int64
	// large is how much of what was given back since the runtime last
	// returned memory to the OS came from buffers too large to be lent
	// again (over maxBodyBufferShift); returning marks a return under way.
	large     atomic.Int64
	returning atomic.Bool
	metrics   *metrics.Metrics
}

// bodyMemoryWait is how long a body waits for its share before it is
// refused: long enough for a burst of large requests to pass one after
// another, short enough that a client is told to retry rather than hang.
const bodyMemoryWait = 5 * time.Second

// bodyMemoryRetry is the Retry-After of a request refused for memory.
const bodyMemoryRetry = 5 * time.Second

// bodyGrowStep is how much more a body of undeclared length takes each
// time it needs more: a few steps for a large body, no lock per read.
const bodyGrowStep = 1 << 20

// returnAfter is how much memory from large buffers must have been given
// back, with no body held any more, before cproxy hands the memory to the
// OS at once rather than leaving it to Go's scavenger, which returns it
// over minutes, and only after a collection that an idle cproxy may not
// run for two: without this, eight 32 MiB bodies left cproxy at 281 MiB
// for over a minute after their clients had gone
// (TestBodyMemoryIsBounded); with it, back near the 23 MiB it started at.
const returnAfter = 64 << 20

// defaultBodyMemory is Options.BodyMemory when it is zero: the config's
// runtime.body_memory_mib default (config.DefaultBodyMemoryMiB), which
// serve passes; a Server built in a test may leave it out.
const defaultBodyMemory = 256 << 20

func newBodyMemory(size int64, m *metrics.Metrics) *bodyMemory {
	return &bodyMemory{sem: semaphore.NewWeighted(size), size: size, wait: bodyMemoryWait, metrics: m}
}

// BodyHold is one request's share of bodyMemory, in its audit record:
// what a body holds is given back when the upstream has read it, and at
// the latest when the request ends. The zero hold of a nil bodyMemory
// holds nothing.
type BodyHold struct {
	m *bodyMemory
	n atomic.Int64
	// large says the body's buffer is its own (not lent by bodyBuffers),
	// so that giving it back may return memory to the OS.
	large bool
}

// grow takes n more bytes for the body.
func (h *BodyHold) grow(ctx context.Context, n int64) error {
	m := h.m
	if n <= 0 || m == nil {
		return nil
	}
	if n > m.size {
		return Refuse(ErrTooLarge, "a request body of %d bytes is over what cproxy may hold of all bodies at once (%d MiB, runtime.body_memory_mib); do not retry", n, m.size>>20)
	}
	if !m.sem.TryAcquire(n) {
		wait, cancel := context.WithTimeout(ctx, m.wait)
		err := m.sem.Acquire(wait, n)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.metrics.BodyMemoryRefused()
			return refuseRetry(ErrUnavailable, bodyMemoryRetry, "cproxy is holding all the request bodies it may at once (%d MiB, runtime.body_memory_mib); retry in a few seconds", m.size>>20)
		}
	}
	h.n.Add(n)
	m.metrics.SetBodyMemory(m.held.Add(n))
	return nil
}

// release gives the body's share back; only the first call after a grow
// does anything.
func (h *BodyHold) release() {
	if h == nil {
		return
	}
	n := h.n.Swap(0)
	if n == 0 {
		return
	}
	m := h.m
	m.sem.Release(n)
	held := m.held.Add(-n)
	m.metrics.SetBodyMemory(held)
	if !h.large {
		return
	}
	if m.large.Add(n) >= returnAfter && held == 0 && m.returning.CompareAndSwap(false, true) {
		m.large.Store(0)
		// Off the request's goroutine: a collection takes milliseconds.
		go func() {
			defer m.returning.Store(false)
			debug.FreeOSMemory()
		}()
	}
}

// Reader is r with the body's share grown as its bytes are read: for a
// route that reads the part of a body it keeps its own way (a push's ref
// updates) within the memory bound of bodies read whole. What is read is
// held until the request ends, or until StopHolding, after which the rest
// streams on without a share. A read that cannot have its share fails with
// the refusal (Refused).
func (h *BodyHold) Reader(ctx context.Context, r io.Reader) *HeldReader {
	return &HeldReader{ctx: ctx, r: r, h: h}
}

// HeldReader is a body read under its request's BodyHold (BodyHold.Reader).
type HeldReader struct {
	ctx  context.Context
	r    io.Reader
	h    *BodyHold
	read int64
	// stopped: what is read now streams on, and takes no more share.
	stopped bool
	refused error
}

// StopHolding lets the rest of the body be read without taking a share:
// it is streamed, not kept.
func (hr *HeldReader) StopHolding() { hr.stopped = true }

// Refused is why a read could not have its share (a refusal to answer
// with), or nil: for a caller that reads through a parser that words its
// own errors.
func (hr *HeldReader) Refused() error { return hr.refused }

func (hr *HeldReader) Read(p []byte) (int, error) {
	if need := hr.read + int64(len(p)) - hr.h.n.Load(); need > 0 && !hr.stopped {
		if err := hr.h.grow(hr.ctx, max(need, bodyGrowStep)); err != nil {
			hr.refused = err
			return 0, err
		}
	}
	n, err := hr.r.Read(p)
	hr.read += int64(n)
	return n, err
}
