package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// Plan bounds a comparison run in count and time. Zero fields take the
// defaults of DefaultPlan.
type Plan struct {
	// Reps is how many times the whole comparison runs, each time on newly
	// started processes, to show how much the numbers move between runs.
	Reps int `json:"reps"`
	// Rounds is how many turns each target gets per measure. Turns rotate
	// through the targets, so a burst of load from elsewhere on the machine
	// falls on all of them rather than on one.
	Rounds int `json:"rounds"`
	// Slice is how long one turn lasts.
	Slice time.Duration `json:"slice_ns"`
	// MaxOps bounds the operations of one turn.
	MaxOps int `json:"max_ops"`
	// Streams is how many streams are held open for the memory measure.
	Streams int `json:"streams"`
	// Progress receives a line per step; nil discards them.
	Progress io.Writer `json:"-"`
}

// DefaultPlan takes about a minute per repetition on a 2-core machine.
var DefaultPlan = Plan{Reps: 3, Rounds: 6, Slice: 400 * time.Millisecond, MaxOps: 20000, Streams: 1000}

func (p Plan) withDefaults() Plan {
	d := DefaultPlan
	if p.Reps > 0 {
		d.Reps = p.Reps
	}
	if p.Rounds > 0 {
		d.Rounds = p.Rounds
	}
	if p.Slice > 0 {
		d.Slice = p.Slice
	}
	if p.MaxOps > 0 {
		d.MaxOps = p.MaxOps
	}
	if p.Streams > 0 {
		d.Streams = p.Streams
	}
	d.Progress = p.Progress
	if d.Progress == nil {
		d.Progress = io.Discard
	}
	return d
}

// Measures, each timed at a concurrency.
const (
	Latency1  = "latency, 1 client"
	Latency16 = "latency, 16 clients"
	First1    = "first SSE event, 1 client"
	First16   = "first SSE event, 16 clients"
)

var measures = []struct {
	name   string
	conc   int
	stream bool
}{
	{Latency1, 1, false},
	{Latency16, 16, false},
	{First1, 1, true},
	{First16, 16, true},
}

// Stats summarise one measure of one target in one repetition.
type Stats struct {
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
	Ops int           `json:"ops"`
	// PerSec is operations per second of wall time, all clients together.
	PerSec float64 `json:"per_sec"`
	// CPU is the proxy's processor time per operation (zero for direct):
	// less disturbed by other load on the machine than latency is.
	CPU time.Duration `json:"cpu_per_op_ns"`
}

// Rep is one repetition's numbers: Stats[measure][target], the memory of
// each proxy before (Idle) and while (Held) Plan.Streams streams are open,
// and what LimitsTarget metered.
type Rep struct {
	Stats   map[string]map[string]Stats `json:"stats"`
	Idle    map[string]Mem              `json:"idle"`
	Held    map[string]Mem              `json:"held"`
	Metered Metered                     `json:"metered"`
}

// Result is a whole comparison run.
type Result struct {
	Plan    Plan     `json:"plan"`
	Targets []string `json:"targets"`
	// Before is the target running an earlier build (Options.Before), whose
	// columns the table adds; empty without one.
	Before string `json:"before,omitempty"`
	// CproxyCPUs, with Before, is how many CPUs cproxy and Before both ran
	// on (runtime.cpus, as their /metrics tell); a run whose two builds
	// differ there fails.
	CproxyCPUs   int           `json:"cproxy_cpus,omitempty"`
	Reps         []Rep         `json:"repetitions"`
	NginxMissing string        `json:"nginx_missing,omitempty"`
	NginxVersion string        `json:"nginx_version,omitempty"`
	Machine      string        `json:"machine"`
	LoadBefore   string        `json:"load_before"` // /proc/loadavg when the run started
	LoadAfter    string        `json:"load_after"`  // and when it ended
	Started      time.Time     `json:"started"`
	Took         time.Duration `json:"took_ns"`
}

// Run measures every target, Plan.Reps times over, each time on newly
// started processes.
func Run(ctx context.Context, o Options, p Plan) (*Result, error) {
	p = p.withDefaults()
	o.Streams = p.Streams
	start := time.Now()
	res := &Result{Plan: p, Machine: machine(), LoadBefore: loadavg(), Started: start.UTC()}
	if o.Before != "" {
		var err error
		if res.Before, err = BeforeTarget(o.BeforeRev); err != nil {
			return nil, err
		}
	}
	for i := range p.Reps {
		fmt.Fprintf(p.Progress, "bench: repetition %d of %d: starting the upstream and the proxies\n", i+1, p.Reps)
		env, err := Start(o)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			for _, t := range env.Targets {
				res.Targets = append(res.Targets, t.Name)
			}
			res.NginxMissing, res.NginxVersion = env.NginxMissing, env.NginxVersion
		}
		if res.Before != "" {
			if res.CproxyCPUs, err = equalCPUs(ctx, env.Target("cproxy"), env.Target(res.Before)); err != nil {
				env.Close()
				return nil, err
			}
		}
		rep, err := measure(ctx, env, p)
		env.Close()
		if err != nil {
			return nil, err
		}
		res.Reps = append(res.Reps, rep)
	}
	res.Took = time.Since(start)
	res.LoadAfter = loadavg()
	return res, nil
}

func measure(ctx context.Context, env *Env, p Plan) (Rep, error) {
	began := time.Now()
	rep := Rep{Stats: map[string]map[string]Stats{}, Idle: map[string]Mem{}, Held: map[string]Mem{}}
	hc := NewClient(32)
	defer hc.CloseIdleConnections()
	bodies := map[bool][]byte{false: Body(false), true: Body(true)}
	opFor := func(t *Target, stream bool) op {
		body := bodies[stream]
		if stream {
			return func(ctx context.Context) (time.Duration, error) { return t.FirstEvent(ctx, hc, body) }
		}
		return func(ctx context.Context) (time.Duration, error) { return t.Message(ctx, hc, body) }
	}
	for _, m := range measures {
		fmt.Fprintf(p.Progress, "bench:   %s\n", m.name)
		tn := turns{conc: m.conc, rounds: p.Rounds, maxOps: p.MaxOps, slice: p.Slice}
		stats, _, err := inTurns(ctx, env.Targets, tn, func(t *Target) op { return opFor(t, m.stream) }, nil)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", m.name, err)
		}
		rep.Stats[m.name] = stats
	}
	for _, t := range env.Targets {
		if t.proc == nil {
			continue
		}
		fmt.Fprintf(p.Progress, "bench:   %d streams through %s\n", p.Streams, t.Name)
		idle, err := t.Memory()
		if err != nil {
			return rep, err
		}
		held, err := t.HoldStreams(ctx, env.UpstreamURL, p.Streams, bodies[true])
		if err != nil {
			return rep, err
		}
		rep.Idle[t.Name], rep.Held[t.Name] = idle, held
	}
	if t := env.Target(LimitsTarget); t != nil {
		m, err := checkMetered(ctx, t, env.scraper, began)
		if err != nil {
			return rep, err
		}
		rep.Metered = m
	}
	return rep, nil
}

// equalCPUs is the number of CPUs both builds of cproxy run on, or an error
// if they differ: the comparison is of their code, not of their settings.
func equalCPUs(ctx context.Context, after, before *Target) (int, error) {
	a, err := fromMetrics(ctx, after.admin, parseCPUs)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", after.Name, err)
	}
	b, err := fromMetrics(ctx, before.admin, parseCPUs)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", before.Name, err)
	}
	if a != b {
		return 0, fmt.Errorf("%s runs on %d CPUs and %s on %d: the builds must run on as many to compare (runtime.cpus)", after.Name, a, before.Name, b)
	}
	return a, nil
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d × %s, Linux %s, %s", runtime.NumCPU(), model, strings.TrimSpace(string(kernel)), runtime.Version())
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
