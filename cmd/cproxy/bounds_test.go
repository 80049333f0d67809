package main

// Bounds a sandbox cannot push past, through the real `cproxy serve`: its
// token's streams and rate when the policy sets neither.

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cproxy/cproxy/policy"
)

// boundsStream opens a streamed model request and returns its response
// once the headers are in; the body stays open until the caller closes it.
func boundsStream(t *testing.T, hc *http.Client, s *served, tok string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", s.proxy+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A token whose budget sets no concurrent has policy.DefaultConcurrent
// requests in flight at most: the next is refused with the budget's 429,
// which says the limit is the default and can be changed.
func TestDefaultConcurrentBoundsAToken(t *testing.T) {
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-1")
	gate := fake.StallStreams(0)
	defer gate.Release()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()

	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for i := range policy.DefaultConcurrent {
		resp := boundsStream(t, hc, s, tok)
		open = append(open, resp)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("stream %d of %d: %s %s", i+1, policy.DefaultConcurrent, resp.Status, b)
		}
	}
	resp := boundsStream(t, hc, s, tok)
	if resp.StatusCode == 200 {
		resp.Body.Close()
		t.Fatalf("stream %d of one token was accepted too", policy.DefaultConcurrent+1)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("budget concurrent = %d, cproxy's default", policy.DefaultConcurrent)
	if resp.StatusCode != 429 || !strings.Contains(string(b), want) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("stream %d: %s %s %v, want 429 naming %q with Retry-After", policy.DefaultConcurrent+1, resp.Status, b, resp.Header, want)
	}
	// Another token has its own count.
	other := boundsStream(t, hc, s, s.mint("conv-2"))
	open = append(open, other)
	if other.StatusCode != 200 {
		t.Fatalf("another token's stream: %s", other.Status)
	}
	gate.Release()
	for _, r := range open {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			t.Errorf("a held stream did not finish: %v", err)
		}
	}
}

// A token whose budget sets no requests_per_minute is throttled to
// policy.DefaultRequestsPerMinute: requests sent as fast as the client
// can meet a 429 once the bucket is empty, and none of the refused ones
// reaches the upstream.
func TestDefaultRateThrottlesAToken(t *testing.T) {
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-1")
	// The bucket holds DefaultRequestsPerMinute and refills at a sixtieth
	// of it a second: far more requests than that can only all pass at a
	// rate no faster than the refill, which a loopback client outruns.
	const most = 20 * policy.DefaultRequestsPerMinute
	var sent, refused atomic.Int64
	var mu sync.Mutex
	var refusal string
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer hc.CloseIdleConnections()
	for range 8 {
		wg.Go(func() {
			for refused.Load() == 0 && sent.Add(1) <= most {
				req, _ := http.NewRequest("GET", s.proxy+"/v1/models", nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Anthropic-Version", "2023-06-01")
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
				case 429:
					mu.Lock()
					refusal = resp.Header.Get("Retry-After") + " " + string(b)
					mu.Unlock()
					refused.Add(1)
				default:
					t.Errorf("%s %s", resp.Status, b)
					return
				}
			}
		})
	}
	wg.Wait()
	want := fmt.Sprintf("budget requests_per_minute = %d, cproxy's default", policy.DefaultRequestsPerMinute)
	if refused.Load() == 0 || !strings.Contains(refusal, want) || strings.HasPrefix(refusal, " ") {
		t.Fatalf("%d requests from one token: %d refused (%q); want a 429 with Retry-After naming %q", min(sent.Load(), most), refused.Load(), refusal, want)
	}
	if got := len(fake.Requests()); got < policy.DefaultRequestsPerMinute {
		t.Errorf("the upstream got %d requests before the first refusal, want the bucket's %d at least", got, policy.DefaultRequestsPerMinute)
	}
}
