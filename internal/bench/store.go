package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL store benchmark: the model route's non-streaming
// request through cproxy on the embedded store, on PostgreSQL, and on
// PostgreSQL with store.lookup_cache, side by side with a direct connection,
// in one run on one upstream; and how long a revocation through one of three
// replicas takes to be in force on the other two, with and without the cache.
// The database is a new one on the server StoreOptions.DSN names, dropped at
// the end.

// Names of the store benchmark's targets.
const (
	StoreBolt     = "embedded"
	StorePG       = "postgres"
	StorePGCached = "postgres+cache"
)

// storeLabels head the table's columns.
var storeLabels = map[string]string{"direct": "direct", StoreBolt: "cproxy, embedded store", StorePG: "cproxy, PostgreSQL",
	StorePGCached: "cproxy, PostgreSQL + lookup_cache"}

// StoreOptions say what RunStore does. Zero fields take DefaultStoreOptions'.
type StoreOptions struct {
	// Cproxy is the cproxy binary; empty: go build it.
	Cproxy string
	// DSN is a postgres:// URL of a role that may create databases
	// (.ci/postgres exports one as CPROXY_TEST_PG_DSN). Required.
	DSN string
	// PGData is the server's data directory (CPROXY_TEST_PG_DATA), whose
	// postmaster.pid leads to the server's processes, to count the
	// database's CPU per request. Empty: not counted.
	PGData string
	// Dir holds configs and logs. Empty: a new temporary directory, removed
	// at the end.
	Dir string
	// Rounds, Slice and MaxOps are as in Plan: turns per target and measure,
	// the length of one, and the most requests in one.
	Rounds int
	Slice  time.Duration
	MaxOps int
	// Revocations is how many revocations are timed per mode.
	Revocations int
	// LookupCache is store.lookup_cache for the cached target and replicas.
	LookupCache time.Duration
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultStoreOptions take about a minute on two cores.
var DefaultStoreOptions = StoreOptions{Rounds: 12, Slice: 500 * time.Millisecond, MaxOps: 20000, Revocations: 50, LookupCache: time.Minute}

// propagationTimeout bounds the wait for one revocation on one replica.
const propagationTimeout = 10 * time.Second

// Propagation is how revocations through replica C reached replicas A and
// B in one mode.
type Propagation struct {
	// Mode is "no cache" or "lookup_cache = …".
	Mode string `json:"mode"`
	// Times are, per revocation and replica (A then B), the time from C's
	// answer to the DELETE to the end of the first request A or B refused.
	Times []time.Duration `json:"times_ns"`
	// Served is how many requests A and B answered 200 after C answered, in
	// all; FirstRefused how many of Times were the first request after it.
	Served       int `json:"served"`
	FirstRefused int `json:"first_refused"`
}

// StoreResult is a whole run.
type StoreResult struct {
	Options StoreOptions `json:"options"`
	Targets []string     `json:"targets"`
	// Stats[measure][target], for Latency1 and Latency16.
	Stats map[string]map[string]Stats `json:"stats"`
	// DBCPU[measure][target] is the database server's processor time per
	// request while the target was measured; empty without PGData.
	DBCPU       map[string]map[string]time.Duration `json:"db_cpu_per_op_ns,omitempty"`
	Revocations []Propagation                       `json:"revocations"`
	PGVersion   string                              `json:"postgres_version"`
	Machine     string                              `json:"machine"`
	LoadBefore  string                              `json:"load_before"`
	LoadAfter   string                              `json:"load_after"`
	Started     time.Time                           `json:"started"`
	Took        time.Duration                       `json:"took_ns"`
}

func (o StoreOptions) withDefaults() StoreOptions {
	d := DefaultStoreOptions
	if o.Rounds > 0 {
		d.Rounds = o.Rounds
	}
	if o.Slice > 0 {
		d.Slice = o.Slice
	}
	if o.MaxOps > 0 {
		d.MaxOps = o.MaxOps
	}
	if o.Revocations > 0 {
		d.Revocations = o.Revocations
	}
	if o.LookupCache > 0 {
		d.LookupCache = o.LookupCache
	}
	d.Cproxy, d.DSN, d.PGData, d.Dir, d.Progress = o.Cproxy, o.DSN, o.PGData, o.Dir, o.Progress
	if d.Progress == nil {
		d.Progress = io.Discard
	}
	return d
}

// pgVariant is cproxy on the PostgreSQL database whose connection string is
// in the file pg-dsn of its directory, with cache as store.lookup_cache.
func pgVariant(name, dir string, cache time.Duration) cproxyVariant {
	store := "[store]\nkind = \"postgres\"\ndsn = \"file:pg-dsn\"\n"
	if cache > 0 {
		store += fmt.Sprintf("lookup_cache = %q\n", cache.String())
	}
	return cproxyVariant{name: name, dir: dir, config: strings.Replace(cproxyConfig, "[store]\npath = \"cproxy.db\"\n", store, 1), policy: cproxyPolicy}
}

// RunStore runs the PostgreSQL store benchmark.
func RunStore(ctx context.Context, o StoreOptions) (_ *StoreResult, err error) {
	o = o.withDefaults()
	if o.DSN == "" {
		return nil, errors.New("no PostgreSQL server: set CPROXY_TEST_PG_DSN (.ci/postgres does) or pass -store-dsn")
	}
	res := &StoreResult{Options: o, Machine: machine(), LoadBefore: loadavg(), Started: time.Now().UTC()}
	res.Options.DSN = "" // it holds the password
	dsn, pgVersion, drop, err := benchDatabase(ctx, o.DSN)
	if err != nil {
		return nil, err
	}
	defer drop()
	res.PGVersion = pgVersion

	e, bin, key, err := startUpstreamOnly(o.Dir, "cproxy-bench-store-", o.Cproxy)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	e.Targets = []*Target{{Name: "direct", URL: e.UpstreamURL, Header: http.Header{"X-Api-Key": {key}}}}
	start := func(v cproxyVariant) (*Target, error) {
		if err := os.MkdirAll(filepath.Join(e.dir, v.dir), 0o700); err != nil {
			return nil, err
		}
		if strings.Contains(v.config, "file:pg-dsn") {
			if err := os.WriteFile(filepath.Join(e.dir, v.dir, "pg-dsn"), []byte(dsn+"\n"), 0o600); err != nil {
				return nil, err
			}
		}
		return e.startCproxy(bin, key, v)
	}
	fmt.Fprintf(o.Progress, "bench-store: starting the upstream and three cproxy (embedded store, PostgreSQL, PostgreSQL + lookup_cache = %q)\n", o.LookupCache.String())
	for _, v := range []cproxyVariant{
		{name: StoreBolt, dir: "bolt", config: cproxyConfig, policy: cproxyPolicy},
		pgVariant(StorePG, "pg", 0),
		pgVariant(StorePGCached, "pg-cache", o.LookupCache),
	} {
		t, err := start(v)
		if err != nil {
			return nil, err
		}
		e.Targets = append(e.Targets, t)
	}
	for _, t := range e.Targets {
		res.Targets = append(res.Targets, t.Name)
	}
	if res.Stats, res.DBCPU, err = storeMeasure(ctx, e.Targets, o); err != nil {
		return nil, err
	}
	for _, t := range e.Targets[1:] {
		t.proc.stop()
	}

	for _, cache := range []time.Duration{0, o.LookupCache} {
		mode := "no cache"
		if cache > 0 {
			mode = fmt.Sprintf("lookup_cache = %q", cache.String())
		}
		fmt.Fprintf(o.Progress, "bench-store: %d revocations across three replicas, %s\n", o.Revocations, mode)
		var replicas []*Target
		for _, name := range []string{"A", "B", "C"} {
			dir := "replica-" + name
			if cache > 0 {
				dir += "-cache"
			}
			t, err := start(pgVariant("replica "+name, dir, cache))
			if err != nil {
				return nil, err
			}
			replicas = append(replicas, t)
		}
		p, err := propagation(ctx, replicas, o.Revocations)
		if err != nil {
			return nil, fmt.Errorf("revocations, %s: %w", mode, err)
		}
		p.Mode = mode
		res.Revocations = append(res.Revocations, p)
		for _, t := range replicas {
			t.proc.stop()
		}
	}
	res.LoadAfter = loadavg()
	res.Took = time.Since(res.Started)
	return res, nil
}

// benchDatabase creates a new database on the server dsn names and returns
// its connection string, the server's version, and a function that drops it.
func benchDatabase(ctx context.Context, dsn string) (string, string, func(), error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", "", nil, errors.New("the PostgreSQL connection string must be a postgres:// URL")
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", "", nil, fmt.Errorf("connect to PostgreSQL at %s: %w", u.Host, err)
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return "", "", nil, err
	}
	name := "cproxy_bench_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, dsn); err == nil {
			conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
			conn.Close(ctx)
		}
	}
	u.Path = "/" + name
	return u.String(), version, drop, nil
}

// storeMeasure times non-streaming requests through each target at 1 and 16
// clients, in turns that rotate through the targets as measure's do, and the
// database's CPU during each target's turns.
func storeMeasure(ctx context.Context, targets []*Target, o StoreOptions) (map[string]map[string]Stats, map[string]map[string]time.Duration, error) {
	hc := NewClient(32)
	defer hc.CloseIdleConnections()
	body := Body(false)
	stats := map[string]map[string]Stats{}
	dbCPUs := map[string]map[string]time.Duration{}
	for _, m := range []struct {
		name string
		conc int
	}{{Latency1, 1}, {Latency16, 16}} {
		fmt.Fprintf(o.Progress, "bench-store:   %s\n", m.name)
		tn := turns{conc: m.conc, rounds: o.Rounds, maxOps: o.MaxOps, slice: o.Slice}
		message := func(t *Target) op {
			return func(ctx context.Context) (time.Duration, error) { return t.Message(ctx, hc, body) }
		}
		db := func() (time.Duration, error) { return postgresCPU(o.PGData) } // 0 without PGData
		s, dbs, err := inTurns(ctx, targets, tn, message, db)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.name, err)
		}
		stats[m.name] = s
		if o.PGData != "" {
			dbCPUs[m.name] = dbs
		}
	}
	return stats, dbCPUs, nil
}

// postgresCPU is the processor time of the PostgreSQL server whose data
// directory is dir: the postmaster and its children (the backends serving
// cproxy's connections among them). Zero when dir is empty.
func postgresCPU(dir string) (time.Duration, error) {
	if dir == "" {
		return 0, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("%s/postmaster.pid: %w", dir, err)
	}
	return procCPU(withChildren(pid))
}

// propagation mints a token through replica A, uses it through A and B
// until both have answered it twice (with a cache, the second time from
// memory), revokes its sandbox through C and polls A and B at once until
// each refuses it, n times over.
func propagation(ctx context.Context, replicas []*Target, n int) (Propagation, error) {
	a, b, c := replicas[0], replicas[1], replicas[2]
	hc := NewClient(4)
	defer hc.CloseIdleConnections()
	body := Body(false)
	var p Propagation
	for i := range n {
		sandbox := fmt.Sprintf("rev-%d", i+1)
		token, _, err := mintToken(a.admin, sandbox)
		if err != nil {
			return p, err
		}
		users := []*Target{{Name: "A", URL: a.URL, Header: bearer(token)}, {Name: "B", URL: b.URL, Header: bearer(token)}}
		for _, u := range append(users, users...) {
			if code, err := statusOf(ctx, hc, u, body); err != nil || code != http.StatusOK {
				return p, fmt.Errorf("%s before the revocation: %d %v", u.Name, code, err)
			}
		}
		if err := revokeSandbox(ctx, c.admin, sandbox); err != nil {
			return p, err
		}
		revoked := time.Now()
		type polled struct {
			took   time.Duration
			served int
			err    error
		}
		results := make([]polled, len(users))
		var wg sync.WaitGroup
		for k, u := range users {
			wg.Go(func() {
				r := &results[k]
				for {
					code, err := statusOf(ctx, hc, u, body)
					switch {
					case err != nil:
						r.err = err
					case code == http.StatusUnauthorized:
						r.took = time.Since(revoked)
					case code != http.StatusOK:
						r.err = fmt.Errorf("%s: status %d", u.Name, code)
					case time.Since(revoked) > propagationTimeout:
						r.err = fmt.Errorf("%s still served the token %v after the revocation", u.Name, propagationTimeout)
					default:
						r.served++
						continue
					}
					return
				}
			})
		}
		wg.Wait()
		for _, r := range results {
			if r.err != nil {
				return p, r.err
			}
			p.Times = append(p.Times, r.took)
			p.Served += r.served
			if r.served == 0 {
				p.FirstRefused++
			}
		}
	}
	return p, nil
}

// statusOf sends one non-streaming request through t and returns the
// answer's status, having read the answer.
func statusOf(ctx context.Context, hc *http.Client, t *Target, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := hc.Do(t.request(ctx, body, false))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// revokeSandbox revokes every token of sandbox through the admin API at admin.
func revokeSandbox(ctx context.Context, admin, sandbox string) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	c, err := adminAPI(admin)
	if err == nil {
		err = c.Revoke(ctx, sandbox)
	}
	if err != nil {
		return fmt.Errorf("revoke %s: %w", sandbox, err)
	}
	return nil
}

// Markdown prints the run's two tables, as docs/benchmarks/postgres-store.md
// holds the latest run's.
func (r *StoreResult) Markdown(w io.Writer) {
	fmt.Fprintf(w, "%s, PostgreSQL %s on the same machine, %s, %s in all; load average %s before, %s after.\n\n",
		r.Machine, r.PGVersion, r.Started.Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second), r.LoadBefore, r.LoadAfter)
	fmt.Fprintln(w, "Model route, non-streaming; in parentheses, the ratio to the embedded store.")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| |")
	for _, t := range r.Targets {
		fmt.Fprintf(w, " %s |", storeLabels[t])
	}
	fmt.Fprint(w, "\n|---|")
	for range r.Targets {
		fmt.Fprint(w, "--:|")
	}
	fmt.Fprintln(w)
	type line struct {
		label   string
		measure string
		value   func(s Stats, db time.Duration) (float64, bool)
		format  string
		ratio   bool // against the embedded store's; not for the database's CPU, which it does not use
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	lines := []line{
		{"latency p50, 1 client", Latency1, func(s Stats, _ time.Duration) (float64, bool) { return ms(s.P50), true }, "%.3f ms", true},
		{"latency p99, 1 client", Latency1, func(s Stats, _ time.Duration) (float64, bool) { return ms(s.P99), true }, "%.3f ms", true},
		{"latency p50, 16 clients", Latency16, func(s Stats, _ time.Duration) (float64, bool) { return ms(s.P50), true }, "%.3f ms", true},
		{"latency p99, 16 clients", Latency16, func(s Stats, _ time.Duration) (float64, bool) { return ms(s.P99), true }, "%.3f ms", true},
		{"throughput, 16 clients", Latency16, func(s Stats, _ time.Duration) (float64, bool) { return s.PerSec, true }, "%.0f req/s", true},
		{"proxy CPU per request, 16 clients", Latency16, func(s Stats, _ time.Duration) (float64, bool) { return micros(s.CPU), s.CPU > 0 }, "%.0f µs", true},
	}
	if len(r.DBCPU) > 0 {
		lines = append(lines,
			line{"PostgreSQL CPU per request, 16 clients", Latency16, func(_ Stats, db time.Duration) (float64, bool) { return micros(db), true }, "%.0f µs", false},
			line{"proxy + PostgreSQL CPU per request, 16 clients", Latency16, func(s Stats, db time.Duration) (float64, bool) { return micros(s.CPU + db), s.CPU > 0 }, "%.0f µs", true})
	}
	for _, l := range lines {
		fmt.Fprintf(w, "| %s |", l.label)
		base, baseOK := l.value(r.Stats[l.measure][StoreBolt], r.DBCPU[l.measure][StoreBolt])
		for _, t := range r.Targets {
			v, ok := l.value(r.Stats[l.measure][t], r.DBCPU[l.measure][t])
			switch {
			case !ok:
				fmt.Fprint(w, " – |")
			case t == StoreBolt || !l.ratio || !baseOK || base == 0:
				fmt.Fprintf(w, " "+l.format+" |", v)
			default:
				fmt.Fprintf(w, " "+l.format+" (%.2f×) |", v, v/base)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Revocation through replica C, until replicas A and B refuse the token (time from C's `204` to the end of the first refused request):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| mode | revocations × replicas | refused at the first request | requests served after C answered | p50 | p99 | max |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|")
	for _, p := range r.Revocations {
		ts := slices.Sorted(slices.Values(p.Times))
		fmt.Fprintf(w, "| %s | %d × 2 | %d of %d | %d | %.2f ms | %.2f ms | %.2f ms |\n", p.Mode, len(ts)/2, p.FirstRefused, len(ts), p.Served,
			ms(percentile(ts, 50)), ms(percentile(ts, 99)), ms(percentile(ts, 100)))
	}
}
