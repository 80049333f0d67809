package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on the load driver, whatever a caller asks for.
const (
	requestTimeout = 30 * time.Second // one request, streams that are not held included
	streamsTimeout = 2 * time.Minute  // opening, holding and releasing every held stream
	openInParallel = 64               // held streams being opened at once
)

// clientHeader is what Claude Code sends on a Messages request, less its
// credential, which each Target adds.
var clientHeader = http.Header{
	"Content-Type":             {"application/json"},
	"Accept":                   {"application/json"},
	"Anthropic-Version":        {"2023-06-01"},
	"Anthropic-Beta":           {"claude-code-20250219,interleaved-thinking-2025-05-14"},
	"User-Agent":               {"claude-cli/2.1.0 (external, cli)"},
	"X-App":                    {"cli"},
	"X-Claude-Code-Session-Id": {"0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99"},
}

// NewClient is the load driver's client: keep-alive connections, conns of
// them per target, and nothing between it and the loopback address.
//
// It sends each request in one write, headers and body together, as Claude
// Code does (strace of `claude -p`: one sendto per request, 64-93 KB). With
// the transport's default 4 KiB write buffer Go's client writes the headers
// and the body's first 3.6 KB, then the rest: a proxy that forwards as it
// reads gets a head start that Claude Code's requests never give it.
func NewClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        8 * conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     requestWriteBuffer,
	}}
}

// requestWriteBuffer holds a whole request of Body's size with its headers.
const requestWriteBuffer = 64 << 10

func (t *Target) request(ctx context.Context, body []byte, hold bool) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+"/v1/messages?beta=true", bytes.NewReader(body))
	if err != nil {
		panic(err) // the URL is built from a listener's address
	}
	for k, v := range clientHeader {
		req.Header[k] = v
	}
	for k, v := range t.Header {
		req.Header[k] = v
	}
	if hold {
		req.Header.Set(HoldHeader, "1")
	}
	return req
}

// statusError reads the start of a refused answer, which says why.
func statusError(t *Target, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("%s: %s: %s", t.Name, resp.Status, bytes.TrimSpace(b))
}

// Message sends one non-streaming request with body and reads the whole
// answer. It returns the time from sending to the answer's last byte.
func (t *Target) Message(ctx context.Context, hc *http.Client, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	start := time.Now()
	resp, err := hc.Do(t.request(ctx, body, false))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, statusError(t, resp)
	}
	t.ok.Add(1)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, fmt.Errorf("%s: reading the answer: %w", t.Name, err)
	}
	return time.Since(start), nil
}

// Stream sends one streaming request and returns the time from sending to
// the end of the first server-sent event (message_start), and a function
// that reads the rest of the stream and reports whether it ended with
// message_stop. A held stream (hold) ends when the upstream is released.
func (t *Target) Stream(ctx context.Context, hc *http.Client, body []byte, hold bool) (time.Duration, func() error, error) {
	start := time.Now()
	resp, err := hc.Do(t.request(ctx, body, hold))
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return 0, nil, statusError(t, resp)
	}
	t.ok.Add(1)
	br := bufio.NewReader(resp.Body)
	for seen := false; ; {
		line, err := br.ReadSlice('\n')
		if err != nil {
			resp.Body.Close()
			return 0, nil, fmt.Errorf("%s: stream ended before its first event: %w", t.Name, err)
		}
		if len(bytes.TrimRight(line, "\r\n")) > 0 {
			seen = true
		} else if seen {
			break
		}
	}
	first := time.Since(start)
	rest := func() error {
		defer resp.Body.Close()
		b, err := io.ReadAll(br)
		switch {
		case err != nil:
			return fmt.Errorf("%s: reading the stream: %w", t.Name, err)
		case !bytes.HasSuffix(b, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")):
			return fmt.Errorf("%s: stream did not end with message_stop", t.Name)
		}
		return nil
	}
	return first, rest, nil
}

// FirstEvent is Stream for a stream that is not held: it reads the whole
// stream and returns the time to its first event.
func (t *Target) FirstEvent(ctx context.Context, hc *http.Client, body []byte) (time.Duration, error) {
	first, _, err := t.WholeStream(ctx, hc, body)
	return first, err
}

// WholeStream sends one streaming request that is not held and reads the
// whole stream: it returns the time from sending to the end of its first
// event and to the end of the stream.
func (t *Target) WholeStream(ctx context.Context, hc *http.Client, body []byte) (first, whole time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	start := time.Now()
	first, rest, err := t.Stream(ctx, hc, body, false)
	if err != nil {
		return 0, 0, err
	}
	if err := rest(); err != nil {
		return 0, 0, err
	}
	return first, time.Since(start), nil
}

// op is one timed operation against a target.
type op func(ctx context.Context) (time.Duration, error)

// loop runs op from conc goroutines, each starting its next operation as
// soon as its last one ends, until d has passed or maxOps have started. It
// returns every operation's time and the wall time from the first start to
// the last end. The first failure stops it.
func loop(ctx context.Context, conc int, d time.Duration, maxOps int, do op) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var started atomic.Int64
	per := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) && started.Add(1) <= int64(maxOps) {
				took, err := do(ctx)
				if err != nil {
					cancel(err)
					return
				}
				per[w] = append(per[w], took)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	return slices.Concat(per...), wall, nil
}

// turns says how one measure is taken: conc clients, rounds of turns of at
// most slice and maxOps requests per target.
type turns struct {
	conc, rounds, maxOps int
	slice                time.Duration
}

// inTurns warms every target up, then runs the op opFor gives for each target
// in rounds of turns that rotate through the targets, so that a burst of load
// from elsewhere on the machine falls on all of them rather than on one. It
// returns each target's Stats and, when side is not nil, how much side (the
// CPU of a process the targets use) grew per request during its turns.
func inTurns(ctx context.Context, targets []*Target, tn turns, opFor func(*Target) op, side func() (time.Duration, error)) (map[string]Stats, map[string]time.Duration, error) {
	// Warm up: connections open, code paged in, pools filled.
	for _, t := range targets {
		if _, _, err := loop(ctx, tn.conc, tn.slice/4, tn.maxOps/10, opFor(t)); err != nil {
			return nil, nil, fmt.Errorf("warming up: %w", err)
		}
	}
	// counters reads t's CPU and side's, around each turn.
	counters := func(t *Target) (cpu, sd time.Duration, err error) {
		if cpu, err = t.CPU(); err != nil || side == nil {
			return cpu, 0, err
		}
		sd, err = side()
		return cpu, sd, err
	}
	lats := map[string][]time.Duration{}
	walls, cpus, sides := map[string]time.Duration{}, map[string]time.Duration{}, map[string]time.Duration{}
	for round := range tn.rounds {
		for j := range targets {
			t := targets[(j+round)%len(targets)]
			cpu0, side0, err := counters(t)
			if err != nil {
				return nil, nil, err
			}
			l, wall, err := loop(ctx, tn.conc, tn.slice, tn.maxOps, opFor(t))
			if err != nil {
				return nil, nil, err
			}
			cpu1, side1, err := counters(t)
			if err != nil {
				return nil, nil, err
			}
			lats[t.Name] = append(lats[t.Name], l...)
			walls[t.Name] += wall
			cpus[t.Name] += cpu1 - cpu0
			sides[t.Name] += side1 - side0
		}
	}
	stats, perReq := map[string]Stats{}, map[string]time.Duration{}
	for name, l := range lats {
		slices.Sort(l)
		n := time.Duration(max(1, len(l)))
		stats[name] = Stats{
			P50: percentile(l, 50), P90: percentile(l, 90), P99: percentile(l, 99), Ops: len(l),
			PerSec: float64(len(l)) / walls[name].Seconds(), CPU: cpus[name] / n,
		}
		perReq[name] = sides[name] / n
	}
	return stats, perReq, nil
}

// openStreams starts n streams through t, openInParallel at a time. Each
// sends on opened what opening it returned and, once it has ended (at once
// when it failed to open), on ended what reading the rest returned.
func (t *Target) openStreams(ctx context.Context, hc *http.Client, body []byte, n int) (opened, ended chan error) {
	opened, ended = make(chan error, n), make(chan error, n)
	sem := make(chan struct{}, openInParallel)
	for range n {
		go func() {
			sem <- struct{}{}
			_, rest, err := t.Stream(ctx, hc, body, true)
			<-sem
			opened <- err
			if err == nil {
				err = rest()
			}
			ended <- err
		}()
	}
	return opened, ended
}

// HoldStreams opens n streams through t at once, each held open by the
// upstream after its first events, and reads t's memory while all n are
// open. It then releases them and checks that each one ends whole.
func (t *Target) HoldStreams(ctx context.Context, upstreamURL string, n int, body []byte) (Mem, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, streamsTimeout, errors.New("streams not done in time"))
	defer cancel()
	tr := &http.Transport{Proxy: nil, MaxIdleConns: n, MaxIdleConnsPerHost: n, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	opened, ended := t.openStreams(ctx, hc, body, n)
	var openErr error
	for range n {
		if err := <-opened; err != nil && openErr == nil {
			openErr = err
			cancel() // the others need not wait for a release
		}
	}
	var mem Mem
	if openErr == nil {
		var err error
		if mem, err = t.Memory(); err != nil {
			openErr = err
		}
	}
	if err := release(ctx, upstreamURL); err != nil && openErr == nil {
		openErr = err
	}
	var endErr error
	for range n {
		if err := <-ended; err != nil && endErr == nil {
			endErr = err
		}
	}
	if openErr != nil {
		return Mem{}, fmt.Errorf("%d streams through %s: %w", n, t.Name, openErr)
	}
	if endErr != nil {
		return Mem{}, fmt.Errorf("%d streams through %s, after release: %w", n, t.Name, endErr)
	}
	return mem, nil
}

func release(ctx context.Context, upstreamURL string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, upstreamURL+ReleasePath, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("release held streams: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("release held streams: %s", resp.Status)
	}
	return nil
}

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
