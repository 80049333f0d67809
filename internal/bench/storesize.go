package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/tokens"
)

// The store-size benchmark: what the embedded store costs as it fills up. For
// each size, a store of that many live tokens is built in bulk; the store's
// own Lookup of random tokens is timed in process, then `cproxy serve` runs
// on the same file and answers a burst of model requests, each with a
// different token, with its memory read before and after. And a year of
// churn, in simulated time: a day's tokens minted, each expiring after its
// TTL, for StoreSizeOptions.Days days, with the file's size read along the
// way, once as the store keeps everything and once pruned of what ended more
// than the retention period before.

// StoreSizeOptions say what RunStoreSize does. Zero fields take
// DefaultStoreSizeOptions'.
type StoreSizeOptions struct {
	// Cproxy is the cproxy binary; empty: go build it.
	Cproxy string
	// Dir holds the stores, configs and logs. Empty: a new temporary
	// directory, removed at the end.
	Dir string
	// Sizes are the numbers of live tokens measured, one store each.
	Sizes []int
	// Lookups is how many random tokens the store's Lookup is timed on, per
	// size, in process.
	Lookups int
	// Requests is how many model requests go through cproxy per size, one
	// client, each with a different token while the store has enough.
	Requests int
	// Days, PerDay and TTL shape the churn: PerDay tokens minted each
	// simulated day, each expiring TTL after it was minted.
	Days   int
	PerDay int
	TTL    time.Duration
	// Retention is how long the pruning side keeps a token after it ended.
	Retention time.Duration
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultStoreSizeOptions take five to eight minutes on two cores: the store
// of a million tokens and the pruned year take most of it.
var DefaultStoreSizeOptions = StoreSizeOptions{
	Sizes: []int{10_000, 100_000, 1_000_000}, Lookups: 200_000, Requests: 10_000,
	Days: 365, PerDay: 1000, TTL: 24 * time.Hour, Retention: 30 * 24 * time.Hour,
}

// sizeConfig is cproxyConfig with the store's own pruning off: a pruning
// pass reads every record, and its first would come a minute after start,
// in the middle of a measurement. The benchmark runs one where it says.
var sizeConfig = strings.Replace(cproxyConfig, "path = \"cproxy.db\"\n", "path = \"cproxy.db\"\nretention = \"0s\"\n", 1)

// bulkBatch is how many tokens go into the store per transaction when it is
// built: large enough that the disk's sync is paid rarely, small enough that
// bbolt's dirty pages stay a few tens of MiB.
const bulkBatch = 50_000

// Served is cproxy serving requests on a store: each a model request from
// one client, each with a different token while the store has enough.
type Served struct {
	// Request is sending to the answer's last byte.
	Request Stats `json:"request"`
	// Start is cproxy's memory once it is ready, After once the requests
	// are answered.
	Start Mem `json:"start"`
	After Mem `json:"after"`
}

// SizeRun is one store size's numbers.
type SizeRun struct {
	Tokens    int           `json:"tokens"`
	FileBytes int64         `json:"file_bytes"`
	Build     time.Duration `json:"build_ns"`
	// Lookup is the store's Lookup of a random live token, in process.
	Lookup Stats `json:"lookup"`
	Served
	// Prune is how long a pruning pass took through the admin API once the
	// requests were answered (it reads every record and deletes none: every
	// token is live), and AfterPrune cproxy's memory after it.
	Prune      time.Duration `json:"prune_ns"`
	AfterPrune Mem           `json:"after_prune"`
}

// ChurnPoint is the store's file after a number of simulated days.
type ChurnPoint struct {
	Day       int   `json:"day"`
	Minted    int   `json:"minted"`
	FileBytes int64 `json:"file_bytes"`
}

// ChurnRun is one simulated year, with or without pruning, and cproxy
// serving the last day's tokens from the store it left.
type ChurnRun struct {
	Pruned bool          `json:"pruned"`
	Points []ChurnPoint  `json:"points"`
	Took   time.Duration `json:"took_ns"`
	Served
}

// StoreSizeResult is a whole run.
type StoreSizeResult struct {
	Options    StoreSizeOptions `json:"options"`
	Sizes      []SizeRun        `json:"sizes"`
	Churn      []ChurnRun       `json:"churn"`
	Machine    string           `json:"machine"`
	LoadBefore string           `json:"load_before"`
	LoadAfter  string           `json:"load_after"`
	Started    time.Time        `json:"started"`
	Took       time.Duration    `json:"took_ns"`
}

func (o StoreSizeOptions) withDefaults() StoreSizeOptions {
	d := DefaultStoreSizeOptions
	if len(o.Sizes) > 0 {
		d.Sizes = o.Sizes
	}
	for _, f := range []struct{ dst, src *int }{{&d.Lookups, &o.Lookups}, {&d.Requests, &o.Requests}, {&d.Days, &o.Days}, {&d.PerDay, &o.PerDay}} {
		if *f.src > 0 {
			*f.dst = *f.src
		}
	}
	if o.TTL > 0 {
		d.TTL = o.TTL
	}
	if o.Retention > 0 {
		d.Retention = o.Retention
	}
	d.Cproxy, d.Dir, d.Progress = o.Cproxy, o.Dir, o.Progress
	if d.Progress == nil {
		d.Progress = io.Discard
	}
	return d
}

// RunStoreSize runs the store-size benchmark.
func RunStoreSize(ctx context.Context, o StoreSizeOptions) (_ *StoreSizeResult, err error) {
	o = o.withDefaults()
	res := &StoreSizeResult{Options: o, Machine: machine(), LoadBefore: loadavg(), Started: time.Now().UTC()}
	e, bin, key, err := startUpstreamOnly(o.Dir, "cproxy-bench-store-size-", o.Cproxy)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	for _, n := range o.Sizes {
		run, err := sizeRun(ctx, e, bin, key, n, o)
		if err != nil {
			return nil, fmt.Errorf("%d tokens: %w", n, err)
		}
		res.Sizes = append(res.Sizes, run)
	}
	for _, pruned := range []bool{false, true} {
		run, err := churn(ctx, e, bin, key, pruned, o)
		if err != nil {
			return nil, fmt.Errorf("churn: %w", err)
		}
		res.Churn = append(res.Churn, run)
	}
	res.LoadAfter = loadavg()
	res.Took = time.Since(res.Started)
	return res, nil
}

// sizeRun measures a store of n live tokens: in process, then through cproxy.
func sizeRun(ctx context.Context, e *Env, bin, key string, n int, o StoreSizeOptions) (SizeRun, error) {
	run := SizeRun{Tokens: n}
	name := "tokens-" + strconv.Itoa(n)
	dir := filepath.Join(e.dir, name)
	path := filepath.Join(dir, "cproxy.db")
	fmt.Fprintf(o.Progress, "bench-store-size: %d tokens: building the store\n", n)
	start := time.Now()
	hashes, sample, err := buildStore(ctx, path, n, o.Requests)
	if err != nil {
		return run, err
	}
	run.Build = time.Since(start)
	fi, err := os.Stat(path)
	if err != nil {
		return run, err
	}
	run.FileBytes = fi.Size()

	fmt.Fprintf(o.Progress, "bench-store-size: %d tokens: %d look-ups in process\n", n, o.Lookups)
	if run.Lookup, err = timeLookups(ctx, path, hashes, o.Lookups); err != nil {
		return run, err
	}

	fmt.Fprintf(o.Progress, "bench-store-size: %d tokens: %d requests through cproxy\n", n, o.Requests)
	t, err := e.startCproxy(bin, key, cproxyVariant{name: name, dir: name, config: sizeConfig, policy: cproxyPolicy})
	if err != nil {
		return run, err
	}
	defer t.proc.stop()
	if run.Served, err = serve(ctx, t, sample, o.Requests); err != nil {
		return run, err
	}
	start = time.Now()
	if err := prunePass(ctx, t.admin); err != nil {
		return run, err
	}
	run.Prune = time.Since(start)
	if run.AfterPrune, err = t.Memory(); err != nil {
		return run, err
	}
	return run, nil
}

// serve reads t's memory, sends count requests through it with the tokens
// of sample, and reads its memory again.
func serve(ctx context.Context, t *Target, sample []string, count int) (Served, error) {
	var sv Served
	var err error
	if sv.Start, err = t.Memory(); err != nil {
		return sv, err
	}
	if sv.Request, err = burst(ctx, t, sample, count); err != nil {
		return sv, err
	}
	sv.After, err = t.Memory()
	return sv, err
}

// prunePass asks cproxy's admin API at admin for a pruning pass, as its
// background pruning makes one every hour.
func prunePass(ctx context.Context, admin string) error {
	c, err := adminAPI(admin)
	if err == nil {
		_, err = c.Prune(ctx, client.PruneOptions{OlderThan: 720 * time.Hour})
	}
	if err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}

// buildStore makes a store at path holding n live tokens for as many
// sandboxes, in transactions of bulkBatch; it returns every token's hash and
// up to keep of the tokens themselves, spread over the store.
func buildStore(ctx context.Context, path string, n, keep int) ([]tokens.Hash, []string, error) {
	s, err := tokens.OpenBolt(path)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	now := time.Now().UTC()
	hashes := make([]tokens.Hash, 0, n)
	every := max(1, n/keep)
	var sample []string
	batch := make(map[tokens.Hash]tokens.Record, bulkBatch)
	for i := range n {
		tok, err := tokens.New()
		if err != nil {
			return nil, nil, err
		}
		h := tok.Hash()
		hashes = append(hashes, h)
		if i%every == 0 && len(sample) < keep {
			sample = append(sample, tok.Reveal())
		}
		batch[h] = tokens.Record{Sandbox: "sandbox-" + strconv.Itoa(i), Profile: "default", CreatedAt: now, ExpiresAt: now.Add(7 * 24 * time.Hour)}
		if len(batch) == bulkBatch || i == n-1 {
			if err := s.CreateAll(ctx, batch); err != nil {
				return nil, nil, err
			}
			clear(batch)
		}
	}
	return hashes, sample, s.Close()
}

// timeLookups opens the store at path afresh and times its Lookup of count
// tokens picked at random from hashes.
func timeLookups(ctx context.Context, path string, hashes []tokens.Hash, count int) (Stats, error) {
	s, err := tokens.OpenBolt(path)
	if err != nil {
		return Stats{}, err
	}
	defer s.Close()
	times := make([]time.Duration, count)
	start := time.Now()
	for i := range times {
		h := hashes[rand.IntN(len(hashes))]
		t0 := time.Now()
		if _, err := s.Lookup(ctx, h); err != nil {
			return Stats{}, fmt.Errorf("look-up of %s: %w", h.ID(), err)
		}
		times[i] = time.Since(t0)
	}
	return statsOf(times, time.Since(start)), nil
}

// burst sends count model requests through t from one client, each with the
// next token of sample (round again when the sample runs out).
func burst(ctx context.Context, t *Target, sample []string, count int) (Stats, error) {
	hc := NewClient(1)
	defer hc.CloseIdleConnections()
	body := []byte(`{"model":"` + Model + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	times := make([]time.Duration, count)
	start := time.Now()
	for i := range times {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+"/v1/messages", bytes.NewReader(body))
		if err != nil {
			return Stats{}, err
		}
		for k, v := range clientHeader {
			req.Header[k] = v
		}
		req.Header.Set("Authorization", "Bearer "+sample[i%len(sample)])
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return Stats{}, err
		}
		if resp.StatusCode != http.StatusOK {
			err := statusError(t, resp)
			resp.Body.Close()
			return Stats{}, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return Stats{}, err
		}
		times[i] = time.Since(t0)
	}
	return statsOf(times, time.Since(start)), nil
}

// statsOf summarises operations that took times, one after the other, in
// wall all told.
func statsOf(times []time.Duration, wall time.Duration) Stats {
	slices.Sort(times)
	return Stats{P50: percentile(times, 50), P90: percentile(times, 90), P99: percentile(times, 99), Ops: len(times),
		PerSec: float64(len(times)) / wall.Seconds()}
}

// churn simulates o.Days days on a new store in e's directory: each day
// o.PerDay tokens are minted at the day's start, expiring o.TTL later, and
// with pruned the store then prunes what ended more than o.Retention before
// the day's end. Time is simulated: the records carry the simulated dates,
// the last day's an hour ago, so that its tokens are live when cproxy then
// serves requests with them from the store.
func churn(ctx context.Context, e *Env, bin, key string, pruned bool, o StoreSizeOptions) (ChurnRun, error) {
	run := ChurnRun{Pruned: pruned}
	name := "churn-kept"
	if pruned {
		name = "churn-pruned"
	}
	path := filepath.Join(e.dir, name, "cproxy.db")
	fmt.Fprintf(o.Progress, "bench-store-size: %d days of %d tokens a day, %s\n", o.Days, o.PerDay, churnLabel(pruned, o.Retention))
	s, err := tokens.OpenBolt(path)
	if err != nil {
		return run, err
	}
	defer s.Close()
	start := time.Now()
	day0 := time.Now().UTC().Add(-time.Hour).AddDate(0, 0, 1-o.Days)
	batch := make(map[tokens.Hash]tokens.Record, o.PerDay)
	var last []string
	for d := range o.Days {
		minted := day0.AddDate(0, 0, d)
		for i := range o.PerDay {
			tok, err := tokens.New()
			if err != nil {
				return run, err
			}
			if d == o.Days-1 {
				last = append(last, tok.Reveal())
			}
			batch[tok.Hash()] = tokens.Record{Sandbox: fmt.Sprintf("sandbox-%d-%d", d, i), Profile: "default", CreatedAt: minted, ExpiresAt: minted.Add(o.TTL)}
		}
		if err := s.CreateAll(ctx, batch); err != nil {
			return run, err
		}
		clear(batch)
		if pruned {
			if err := pruneAll(ctx, s, minted.AddDate(0, 0, 1).Add(-o.Retention)); err != nil {
				return run, err
			}
		}
		if day := d + 1; day%30 == 0 || day == o.Days || day == 1 {
			fi, err := os.Stat(path)
			if err != nil {
				return run, err
			}
			run.Points = append(run.Points, ChurnPoint{Day: day, Minted: day * o.PerDay, FileBytes: fi.Size()})
		}
	}
	run.Took = time.Since(start)
	if err := s.Close(); err != nil {
		return run, err
	}
	fmt.Fprintf(o.Progress, "bench-store-size: %d requests through cproxy with the last day's tokens\n", o.Requests)
	t, err := e.startCproxy(bin, key, cproxyVariant{name: name, dir: name, config: sizeConfig, policy: cproxyPolicy})
	if err != nil {
		return run, err
	}
	defer t.proc.stop()
	run.Served, err = serve(ctx, t, last, o.Requests)
	return run, err
}

// pruneAll deletes every token of s that died at or before cutoff, in
// batches of tokens.PruneBatch, as cproxy's background pruning does.
func pruneAll(ctx context.Context, s *tokens.BoltStore, cutoff time.Time) error {
	for {
		pruned, err := s.Prune(ctx, cutoff, tokens.PruneBatch)
		if err != nil || len(pruned) < tokens.PruneBatch {
			return err
		}
	}
}

func churnLabel(pruned bool, retention time.Duration) string {
	if !pruned {
		return "nothing pruned"
	}
	return fmt.Sprintf("pruned %s after the end", hours(retention))
}

// hours writes d as a whole number of days or hours: "30 days", "24 h".
func hours(d time.Duration) string {
	if d%(24*time.Hour) == 0 && d >= 48*time.Hour {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return fmt.Sprintf("%g h", d.Hours())
}

// Markdown prints the run's tables.
func (r *StoreSizeResult) Markdown(w io.Writer) {
	fmt.Fprintf(w, "%s, %s, %s in all; load average %s before, %s after.\n\n",
		r.Machine, r.Started.Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second), r.LoadBefore, r.LoadAfter)
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	served := func(s Served) string {
		return fmt.Sprintf("%.0f / %.0f µs | %.1f MiB (%.1f) | %.1f MiB (%.1f)",
			us(s.Request.P50), us(s.Request.P99), mib(s.Start.RSS), mib(s.Start.Anon), mib(s.After.RSS), mib(s.After.Anon))
	}
	fmt.Fprintf(w, "Live tokens in the embedded store: the store's Lookup of a random one (%d, in process), a model request through cproxy with a different token each (%d, one client), cproxy's memory (RSS, and in parentheses its anonymous part: heap and stacks without the store's file mapped in), and a pruning pass through the admin API that deletes nothing.\n\n",
		r.Options.Lookups, r.Options.Requests)
	fmt.Fprintln(w, "| tokens | store file | built in | Lookup p50 / p99 | request p50 / p99 | cproxy RSS at start | after the requests | pruning pass | after it |")
	fmt.Fprintln(w, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range r.Sizes {
		fmt.Fprintf(w, "| %d | %.1f MiB | %.1f s | %.1f / %.1f µs | %s | %.2f s | %.1f MiB (%.1f) |\n",
			s.Tokens, mib(s.FileBytes), s.Build.Seconds(), us(s.Lookup.P50), us(s.Lookup.P99), served(s.Served),
			s.Prune.Seconds(), mib(s.AfterPrune.RSS), mib(s.AfterPrune.Anon))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Churn in simulated time: %d days, %d tokens minted a day, each expiring %s after; the store file's size.\n\n",
		r.Options.Days, r.Options.PerDay, hours(r.Options.TTL))
	fmt.Fprint(w, "| day | tokens minted |")
	for _, c := range r.Churn {
		fmt.Fprintf(w, " %s |", churnLabel(c.Pruned, r.Options.Retention))
	}
	fmt.Fprint(w, "\n|--:|--:|")
	for range r.Churn {
		fmt.Fprint(w, "--:|")
	}
	fmt.Fprintln(w)
	if len(r.Churn) == 0 {
		return
	}
	for i, p := range r.Churn[0].Points {
		fmt.Fprintf(w, "| %d | %d |", p.Day, p.Minted)
		for _, c := range r.Churn {
			fmt.Fprintf(w, " %.1f MiB |", mib(c.Points[i].FileBytes))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nThen cproxy on each store, %d requests with the last day's tokens:\n\n", r.Options.Requests)
	fmt.Fprintln(w, "| store | request p50 / p99 | cproxy RSS at start | after the requests |")
	fmt.Fprintln(w, "|---|--:|--:|--:|")
	for _, c := range r.Churn {
		fmt.Fprintf(w, "| %s | %s |\n", churnLabel(c.Pruned, r.Options.Retention), served(c.Served))
	}
}
