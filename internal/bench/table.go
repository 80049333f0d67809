package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// row is one line of the report: a quantity per target and repetition, how
// it compares with the do-nothing proxy's, and the target it must meet.
type row struct {
	label string
	unit  string
	// value is what the row compares; ok is false where it does not apply.
	value func(r Rep, target string) (v float64, ok bool)
	// total, when set, is shown in parentheses after value, and the ÷ direct
	// column divides totals (added latency over direct is meaningless).
	total func(r Rep, target string) (v float64, ok bool)
	// goal says what cproxy must meet; meets judges one repetition from the
	// cproxy ÷ Go proxy ratio and cproxy's own value.
	goal  string
	meets func(ratio, cproxy float64) bool
	// overhead is what the row costs over a direct connection, for the
	// growth of LimitsTarget's over cproxy's; nil: value. judged says the
	// growth is held to maxGrowth (p99s move too much between runs
	// to judge a 10 % difference by); higher says more is better
	// (throughput).
	overhead func(r Rep, target string) (v float64, ok bool)
	judged   bool
	higher   bool
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func pick(measure string, p99 bool) func(Rep, string) (float64, bool) {
	return func(r Rep, target string) (float64, bool) {
		s, ok := r.Stats[measure][target]
		if !ok {
			return 0, false
		}
		if p99 {
			return micros(s.P99), true
		}
		return micros(s.P50), true
	}
}

// added is a latency minus the direct connection's: what the proxy adds.
func added(total func(Rep, string) (float64, bool)) func(Rep, string) (float64, bool) {
	return func(r Rep, target string) (float64, bool) {
		v, ok := total(r, target)
		d, dok := total(r, "direct")
		if !ok || !dok || target == "direct" {
			return 0, false
		}
		return v - d, true
	}
}

func rows(streams int) []row {
	var rs []row
	for _, m := range []struct {
		measure string
		clients int
	}{{Latency1, 1}, {Latency16, 16}} {
		for _, p99 := range []bool{false, true} {
			pct := "p50"
			if p99 {
				pct = "p99"
			}
			total := pick(m.measure, p99)
			// The p99s move by 15–30 % between runs of one build.
			limit := 1.1
			if p99 {
				limit = 1.2
			}
			rs = append(rs, row{
				label: fmt.Sprintf("added latency %s, %d client%s", pct, m.clients, plural(m.clients)),
				unit:  "µs", value: added(total), total: total,
				goal: fmt.Sprintf("≤ %.1f× Go proxy", limit), meets: func(ratio, _ float64) bool { return ratio <= limit },
				judged: !p99,
			})
		}
	}
	rs = append(rs, row{
		label: "throughput, 16 clients", unit: "req/s",
		value: func(r Rep, target string) (float64, bool) {
			s, ok := r.Stats[Latency16][target]
			return s.PerSec, ok
		},
		goal: "≥ 0.95× Go proxy", meets: func(ratio, _ float64) bool { return ratio >= 0.95 },
		judged: true, higher: true,
	})
	for _, m := range []struct {
		measure string
		clients int
	}{{Latency1, 1}, {Latency16, 16}} {
		rs = append(rs, row{
			label: fmt.Sprintf("proxy CPU per request, %d client%s", m.clients, plural(m.clients)), unit: "µs",
			value: func(r Rep, target string) (float64, bool) {
				s, ok := r.Stats[m.measure][target]
				return micros(s.CPU), ok && target != "direct"
			},
			judged: true,
		})
	}
	for _, m := range []struct {
		measure string
		clients int
	}{{First1, 1}, {First16, 16}} {
		for _, p99 := range []bool{false, true} {
			pct := "p50"
			if p99 {
				pct = "p99"
			}
			rs = append(rs, row{
				label: fmt.Sprintf("first SSE event %s, %d client%s", pct, m.clients, plural(m.clients)),
				unit:  "µs", value: pick(m.measure, p99),
				goal: "≤ 1.0× Go proxy", meets: func(ratio, _ float64) bool { return ratio <= 1.0 },
				overhead: added(pick(m.measure, p99)), judged: !p99,
			})
		}
	}
	mib := func(m Mem) float64 { return float64(m.Peak) / (1 << 20) }
	rs = append(rs,
		row{
			label: "RSS after the latency runs", unit: "MiB",
			value: func(r Rep, target string) (float64, bool) {
				m, ok := r.Idle[target]
				return float64(m.RSS) / (1 << 20), ok
			},
		},
		row{
			label: fmt.Sprintf("peak RSS, %d open streams", streams), unit: "MiB",
			value: func(r Rep, target string) (float64, bool) {
				m, ok := r.Held[target]
				return mib(m), ok
			},
			goal: "< 100 MiB", meets: func(_, cproxy float64) bool { return cproxy < 100 },
			judged: true,
		},
	)
	return rs
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// across is one quantity over the repetitions that have it.
type across []float64

func (a across) median() float64 {
	s := slices.Clone(a)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *Result) collect(f func(Rep, string) (float64, bool), target string) across {
	var a across
	for _, rep := range r.Reps {
		if v, ok := f(rep, target); ok {
			a = append(a, v)
		}
	}
	return a
}

// ratios is num(target)/den(by) per repetition; a repetition whose
// denominator is not positive (noise can make an added latency ≤ 0) is left
// out.
func (r *Result) ratios(num, den func(Rep, string) (float64, bool), target, by string) across {
	var a across
	for _, rep := range r.Reps {
		n, ok := num(rep, target)
		d, dok := den(rep, by)
		if ok && dok && d > 0 {
			a = append(a, n/d)
		}
	}
	return a
}

func formatValue(v float64, unit string) string {
	if unit == "MiB" {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// formatRatio is the median ratio and, with more than one repetition, the
// range over them: how far the numbers move between runs.
func formatRatio(a across) string {
	switch len(a) {
	case 0:
		return "—"
	case 1:
		return fmt.Sprintf("%.2f", a[0])
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", a.median(), slices.Min(a), slices.Max(a))
}

// A column is a target the table shows, and its title.
type column struct{ target, title string }

// columns are the targets in the order the table shows them.
var columns = []column{
	{"direct", "direct"}, {"goproxy", "Go proxy"}, {"nginx", "nginx"}, {"cproxy", "cproxy"}, {LimitsTarget, "cproxy+limits"},
	{"routes", "routes.Server"}, {SharedProxyTarget, "Go proxy, shared executable"},
	{OneCPUProxyTarget, "Go proxy, 1 CPU"}, {OneCPUCproxyTarget, "cproxy, 1 CPU"},
}

// A ratioColumn divides one target's number by another's.
type ratioColumn struct{ num, den, title string }

// ratioColumns are the ratios every table shows, where it has both targets.
var ratioColumns = []ratioColumn{
	{"cproxy", "goproxy", "cproxy ÷ Go proxy"},
	{"cproxy", "direct", "cproxy ÷ direct"},
	{"nginx", "goproxy", "nginx ÷ Go proxy"},
	{"routes", "goproxy", "routes.Server ÷ Go proxy"},
	{"goproxy", SharedProxyTarget, "Go proxy ÷ Go proxy, shared executable"},
	{OneCPUCproxyTarget, OneCPUProxyTarget, "cproxy ÷ Go proxy, both 1 CPU"},
}

// tableColumns are columns and, with an earlier build, its column after
// cproxy+limits.
func (r *Result) tableColumns() []column {
	if r.Before == "" {
		return columns
	}
	i := slices.IndexFunc(columns, func(c column) bool { return c.target == LimitsTarget }) + 1
	return slices.Insert(slices.Clone(columns), i, column{r.Before, r.Before})
}

// tableRatios are ratioColumns and, with an earlier build, its ratios to
// the same floors as cproxy's and cproxy's ratio to it: after ÷ before.
func (r *Result) tableRatios() []ratioColumn {
	if r.Before == "" {
		return ratioColumns
	}
	b := r.Before
	return append(slices.Clone(ratioColumns),
		ratioColumn{b, "goproxy", b + " ÷ Go proxy"},
		ratioColumn{b, "direct", b + " ÷ direct"},
		ratioColumn{"cproxy", b, "cproxy ÷ " + b},
	)
}

// Markdown writes the comparison table and what it was measured on.
func (r *Result) Markdown(w io.Writer) {
	has := func(name string) bool { return slices.Contains(r.Targets, name) }
	cols, ratios := r.tableColumns(), r.tableRatios()
	head := []string{"measure", "unit"}
	align := []string{"---", "---"}
	for _, c := range cols {
		if has(c.target) || c.target == "nginx" {
			head, align = append(head, c.title), append(align, "--:")
		}
	}
	for _, c := range ratios {
		if has(c.num) && has(c.den) {
			head, align = append(head, c.title), append(align, "--:")
		}
	}
	head, align = append(head, "target", "met"), append(align, "---", "---")
	oneCPU := has(OneCPUCproxyTarget) && has(OneCPUProxyTarget)
	if oneCPU {
		head, align = append(head, "met, both 1 CPU"), append(align, "---")
	}
	fmt.Fprintf(w, "| %s |\n|%s|\n", strings.Join(head, " | "), strings.Join(align, "|"))

	for _, rw := range rows(r.Plan.Streams) {
		cells := []string{rw.label, rw.unit}
		for _, c := range cols {
			t := c.target
			v := r.collect(rw.value, t)
			switch {
			case !has(t) && t == "nginx":
				cells = append(cells, "not run")
			case !has(t):
			case t == "direct" && rw.total != nil:
				cells = append(cells, formatValue(r.collect(rw.total, t).median(), rw.unit))
			case len(v) == 0:
				cells = append(cells, "—")
			case rw.total != nil:
				cells = append(cells, fmt.Sprintf("+%s (%s)", formatValue(v.median(), rw.unit), formatValue(r.collect(rw.total, t).median(), rw.unit)))
			default:
				cells = append(cells, formatValue(v.median(), rw.unit))
			}
		}
		for _, c := range ratios {
			if !has(c.num) || !has(c.den) {
				continue
			}
			f := rw.value
			if c.den == "direct" && rw.total != nil {
				f = rw.total
			}
			cells = append(cells, formatRatio(r.ratios(f, f, c.num, c.den)))
		}
		cells = append(cells, rw.goal, r.met(rw, "cproxy", "goproxy"))
		if oneCPU {
			cells = append(cells, r.met(rw, OneCPUCproxyTarget, OneCPUProxyTarget))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\nLatency rows: what the proxy adds to the direct connection's time (median over repetitions), then the total in parentheses; ÷ Go proxy divides added latencies, ÷ direct total ones. Ratios are medians over %d repetitions, with their range in parentheses. \"met\" counts the repetitions in which cproxy met the target.\n\n", len(r.Reps))
	fmt.Fprintf(w, "- machine: %s\n", r.Machine)
	if r.NginxVersion != "" {
		fmt.Fprintf(w, "- nginx: %s\n", r.NginxVersion)
	}
	if r.NginxMissing != "" {
		fmt.Fprintf(w, "- nginx: not run: %s\n", r.NginxMissing)
	}
	fmt.Fprintf(w, "- plan: %d repetitions × %d rounds × %s per target and measure (at most %d requests each), %d held streams; took %s\n",
		r.Plan.Reps, r.Plan.Rounds, r.Plan.Slice, r.Plan.MaxOps, r.Plan.Streams, r.Took.Round(time.Second))
	fmt.Fprintf(w, "- load average before and after: %s / %s\n", r.LoadBefore, r.LoadAfter)
	if r.Before != "" {
		fmt.Fprintf(w, "- cproxy and %s both on %d CPU%s (%s)\n", r.Before, r.CproxyCPUs, plural(r.CproxyCPUs), gomaxprocsMetric)
	}
	var ops []string
	for _, m := range measures {
		ops = append(ops, fmt.Sprintf("%s: %s", m.name, formatOps(r, m.name)))
	}
	fmt.Fprintf(w, "- requests timed per target, first repetition: %s\n", strings.Join(ops, "; "))
	if has("cproxy") && has(LimitsTarget) {
		r.growthMarkdown(w)
	}
}

// The limits' target: with budgets, metrics and the audit log on, cproxy's
// overhead over a direct connection grows by at most this factor.
const maxGrowth = 1.10

// growthMarkdown writes how much LimitsTarget's overhead over a direct
// connection exceeds cproxy's, row by row, against maxGrowth, and
// what LimitsTarget metered.
func (r *Result) growthMarkdown(w io.Writer) {
	fmt.Fprintf(w, "\n%s: overhead over a direct connection (added latency, added time to the first event, throughput, CPU, memory), with budgets, the JSON audit log and a /metrics scrape every %s on, against cproxy's default config. Target: grows by at most %.0f %%.\n\n",
		LimitsTarget, scrapeInterval, (maxGrowth-1)*100)
	fmt.Fprintf(w, "| overhead | unit | cproxy | %s | %s ÷ cproxy | target | met |\n|---|---|--:|--:|--:|---|---|\n", LimitsTarget, LimitsTarget)
	var missed []string
	judged := 0
	for _, rw := range rows(r.Plan.Streams) {
		f := rw.overhead
		label := rw.label
		if f == nil {
			f = rw.value
		} else {
			label = "added " + label
		}
		goal, met := "", ""
		if rw.judged {
			judged++
			goal = fmt.Sprintf("≤ %.2f×", maxGrowth)
			if rw.higher {
				goal = fmt.Sprintf("≥ %.2f× (1/%.2f)", 1/maxGrowth, maxGrowth)
			}
			var n int
			met, n = r.growthMet(f, rw.higher)
			if n < len(r.Reps) {
				missed = append(missed, fmt.Sprintf("%s (%d/%d)", label, n, len(r.Reps)))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", label, rw.unit,
			formatValue(r.collect(f, "cproxy").median(), rw.unit), formatValue(r.collect(f, LimitsTarget).median(), rw.unit),
			formatRatio(r.ratios(f, f, LimitsTarget, "cproxy")), goal, met)
	}
	if len(missed) == 0 {
		fmt.Fprintf(w, "\nThe target: **met** on all %d judged rows in every repetition.\n", judged)
	} else {
		fmt.Fprintf(w, "\nThe target: **missed** in some repetition on %d of %d judged rows: %s.\n", len(missed), judged, strings.Join(missed, "; "))
	}
	fmt.Fprintf(w, "\nWhat %s metered, per repetition (a budget that metered nothing would have measured nothing):\n\n", LimitsTarget)
	for i, rep := range r.Reps {
		m := rep.Metered
		note := ""
		switch {
		case m.DayRolled:
			note = " (the UTC day changed during the repetition: the budget's window started again)"
		case m.Usage.Requests != m.Answered:
			note = " (**differs** from the requests answered)"
		}
		lost := ""
		if m.AuditLines != m.Answered {
			lost = " (**not one per request**)"
		}
		fmt.Fprintf(w, "- repetition %d: %d requests answered, all 200; token usage: %d requests%s, %d input, %d output, %d cache-read tokens; %d audit records%s; %d scrapes of /metrics, %v refused or failed model requests counted there\n",
			i+1, m.Answered, m.Usage.Requests, note, m.Usage.Input, m.Usage.Output, m.Usage.CacheRead, m.AuditLines, lost, m.Scrapes, m.Refused)
	}
}

// growthMet counts the repetitions in which LimitsTarget's quantity f is
// within maxGrowth of cproxy's, and says so as the met column does.
func (r *Result) growthMet(f func(Rep, string) (float64, bool), higher bool) (string, int) {
	n, reps := 0, 0
	for _, rep := range r.Reps {
		lim, lok := f(rep, LimitsTarget)
		c, cok := f(rep, "cproxy")
		if !lok || !cok {
			continue
		}
		reps++
		if (higher && lim*maxGrowth >= c) || (!higher && lim <= c*maxGrowth) {
			n++
		}
	}
	switch n {
	case reps:
		return fmt.Sprintf("yes (%d/%d)", n, reps), n
	case 0:
		return fmt.Sprintf("**no** (0/%d)", reps), n
	}
	return fmt.Sprintf("mixed (%d/%d)", n, reps), n
}

// met counts the repetitions in which cproxy (the target cproxy) met the
// row's target against floor, the do-nothing proxy on as many CPUs.
func (r *Result) met(rw row, cproxy, floor string) string {
	if rw.meets == nil {
		return ""
	}
	n, reps := 0, 0
	for _, rep := range r.Reps {
		own, ok := rw.value(rep, cproxy)
		if !ok {
			continue
		}
		ratio := 0.0
		if g, ok := rw.value(rep, floor); ok && g > 0 {
			ratio = own / g
		}
		reps++
		if rw.meets(ratio, own) {
			n++
		}
	}
	switch n {
	case reps:
		return fmt.Sprintf("yes (%d/%d)", n, reps)
	case 0:
		return fmt.Sprintf("**no** (0/%d)", reps)
	}
	return fmt.Sprintf("mixed (%d/%d)", n, reps)
}

func formatOps(r *Result, measure string) string {
	if len(r.Reps) == 0 {
		return ""
	}
	var parts []string
	for _, t := range r.Targets {
		parts = append(parts, fmt.Sprintf("%s %d", t, r.Reps[0].Stats[measure][t].Ops))
	}
	return strings.Join(parts, ", ")
}
