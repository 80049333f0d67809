package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/tokens"
)

// scrapeInterval is how often the scraper reads LimitsTarget's /metrics:
// more often than Prometheus' usual 15 s to 1 min, so that the cost of
// being scraped is in the numbers rather than rounded away.
const scrapeInterval = 2 * time.Second

// promAccept is what Prometheus asks a target for (it also accepts gzip).
const promAccept = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.1"

// Bounds on the checks of what LimitsTarget metered.
const (
	checkTimeout = 10 * time.Second                      // one admin request
	settleWait   = 3 * time.Second                       // for the last usage to settle and audit records to be written
	settlePoll   = 50 * time.Millisecond                 // how often to look meanwhile
	maxMetrics   = 16 << 20                              // the most of a /metrics answer read
	maxTokenList = 1 << 20                               // the most of a GET /tokens answer read
	scrapeBudget = scrapeInterval - 100*time.Millisecond // one scrape, so they never pile up
)

// scraper reads /metrics of a cproxy's admin listener at once and then every
// interval, as Prometheus would, until stopped.
type scraper struct {
	url    string
	hc     *http.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	n   int   // scrapes answered 200
	err error // the first failed scrape
}

func startScraper(admin string, every time.Duration) *scraper {
	ctx, cancel := context.WithCancel(context.Background())
	s := &scraper{url: admin + "/metrics", hc: &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}},
		cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			err := s.scrape(ctx)
			s.mu.Lock()
			if err == nil {
				s.n++
			} else if s.err == nil && ctx.Err() == nil {
				s.err = err
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// scrape asks as Prometheus does, gzip included, and reads the whole answer
// without decompressing it: that is the scraper's work, not cproxy's.
func (s *scraper) scrape(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, scrapeBudget)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	req.Header.Set("Accept", promAccept)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxMetrics)); err != nil {
		return fmt.Errorf("scrape %s: %w", s.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: %s", s.url, resp.Status)
	}
	return nil
}

// count is how many scrapes succeeded so far, and the first failure.
func (s *scraper) count() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.err
}

func (s *scraper) stop() {
	s.cancel()
	<-s.done
	s.hc.CloseIdleConnections()
}

// Metered is what LimitsTarget counted in one repetition, next to what the
// driver saw: a benchmark of budgets that metered nothing would measure
// nothing.
type Metered struct {
	// Answered is the requests the target answered with 200, warm-up and
	// held streams included: every request the driver sent it.
	Answered int64 `json:"answered"`
	// Usage is its token's usage at the end, from GET /tokens.
	Usage tokens.Usage `json:"usage"`
	// Refused is the model-route requests cproxy_requests_total counts with
	// a status other than 200.
	Refused float64 `json:"refused"`
	// AuditLines is the lines of its JSON audit log.
	AuditLines int64 `json:"audit_lines"`
	// Scrapes is how many times the scraper read its /metrics.
	Scrapes int `json:"scrapes"`
	// DayRolled is set when the UTC day changed during the repetition: the
	// budget's window started again, so Usage covers only part of it.
	DayRolled bool `json:"day_rolled"`
}

// checkMetered reads what t (LimitsTarget) metered, waiting a little for
// the last requests to settle and their audit records to be written, and
// fails if it metered nothing, refused anything, or its scrapes failed.
func checkMetered(ctx context.Context, t *Target, s *scraper, began time.Time) (Metered, error) {
	m := Metered{Answered: t.ok.Load()}
	var err error
	for deadline := time.Now().Add(settleWait); ; {
		if m.Usage, err = tokenUsage(ctx, t.admin, t.tokenID); err != nil {
			return m, err
		}
		if m.AuditLines, err = countLines(filepath.Join(t.dir, "audit.jsonl")); err != nil {
			return m, err
		}
		if (m.Usage.Requests >= m.Answered && m.AuditLines >= m.Answered) || time.Now().After(deadline) {
			break
		}
		time.Sleep(settlePoll)
	}
	m.DayRolled = !sameUTCDay(began, time.Now())
	if m.Refused, err = fromMetrics(ctx, t.admin, parseRefused); err != nil {
		return m, err
	}
	m.Scrapes, err = s.count()
	switch {
	case err != nil:
		return m, fmt.Errorf("%s: %w", t.Name, err)
	case m.Scrapes == 0:
		return m, fmt.Errorf("%s: its /metrics was never scraped", t.Name)
	case m.Usage.Requests == 0 || m.Usage.Input == 0 || m.Usage.Output == 0:
		return m, fmt.Errorf("%s: its token's budget metered nothing (usage %+v after %d requests)", t.Name, m.Usage, m.Answered)
	case m.Refused != 0:
		return m, fmt.Errorf("%s: %v model requests refused or failed (cproxy_requests_total)", t.Name, m.Refused)
	case m.AuditLines == 0:
		return m, fmt.Errorf("%s: its audit log is empty", t.Name)
	}
	return m, nil
}

func sameUTCDay(a, b time.Time) bool {
	ay, am, ad := a.UTC().Date()
	by, bm, bd := b.UTC().Date()
	return ay == by && am == bm && ad == bd
}

func adminGet(ctx context.Context, url, accept string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// tokenUsage is the usage of the token id, which must have a budget, from
// the admin API's GET /tokens.
func tokenUsage(ctx context.Context, admin, id string) (tokens.Usage, error) {
	c, err := adminAPI(admin)
	if err != nil {
		return tokens.Usage{}, err
	}
	list, err := c.List(ctx, "")
	if err != nil {
		return tokens.Usage{}, fmt.Errorf("GET /tokens: %w", err)
	}
	return usageOf(list, id)
}

// usageOf is the usage of the token id in list, which must have a budget.
func usageOf(list []client.TokenInfo, id string) (tokens.Usage, error) {
	for _, tok := range list {
		if tok.ID != id {
			continue
		}
		if tok.Budget == nil || tok.Usage == nil {
			return tokens.Usage{}, fmt.Errorf("GET /tokens: token %s has no budget or no usage: its profile's budget is not in force", id)
		}
		u := tok.Usage
		return tokens.Usage{Requests: u.Requests, Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens,
			MCPCalls: u.MCPCalls}, nil
	}
	return tokens.Usage{}, fmt.Errorf("GET /tokens: no token %s", id)
}

// fromMetrics reads what parse finds in the /metrics answer of the admin
// API at admin, asked for in Prometheus' text format.
func fromMetrics[T any](ctx context.Context, admin string, parse func([]byte) (T, error)) (T, error) {
	b, err := adminGet(ctx, admin+"/metrics", "text/plain;version=0.0.4", maxMetrics)
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(b)
}

// parseRefused sums cproxy_requests_total over the model route's statuses
// other than 200.
func parseRefused(b []byte) (float64, error) {
	var n float64
	seen := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "cproxy_requests_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || !strings.Contains(labels, `route="model"`) {
			continue
		}
		seen = true
		if strings.Contains(labels, `status="200"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		n += v
	}
	if !seen {
		return 0, errors.New(`/metrics: no cproxy_requests_total{route="model"} series`)
	}
	return n, sc.Err()
}

// countLines counts the newlines of the file at path.
func countLines(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	buf := make([]byte, 256<<10)
	for {
		k, err := f.Read(buf)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// gomaxprocsMetric is the Go collector's gauge of the CPUs a process may
// run Go code on at once: cproxy's runtime.cpus.
const gomaxprocsMetric = "go_sched_gomaxprocs_threads"

// parseCPUs reads gomaxprocsMetric, how many CPUs a cproxy runs on, from
// its /metrics answer.
func parseCPUs(b []byte) (int, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("/metrics: %w", err)
	}
	f := fams[gomaxprocsMetric]
	if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge() == nil {
		return 0, fmt.Errorf("/metrics: no gauge %s", gomaxprocsMetric)
	}
	return int(f.GetMetric()[0].GetGauge().GetValue()), nil
}
