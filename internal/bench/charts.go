package bench

import (
	"fmt"
	"slices"
	"time"

	"github.com/cproxy/cproxy/internal/bench/chart"
)

// The charts docs/benchmarks.md embeds, by file name, and the report each is
// drawn from.
var chartFiles = []struct {
	file, benchmark string
	draw            func(*Report) *chart.Chart
}{
	{"model-latency.svg", BenchModelRoute, modelLatencyChart},
	{"model-throughput.svg", BenchModelRoute, modelThroughputChart},
	{"git-clone.svg", BenchGitClone, gitChart},
	{"npm-ci.svg", BenchNPMCI, npmChart},
}

// Charts draws every chart whose report is in reports (keyed by
// Report.Benchmark) and returns the SVGs by file name, in a fixed order.
// A chart whose report is missing is left out.
func Charts(reports map[string]*Report) ([]NamedSVG, error) {
	var out []NamedSVG
	for _, c := range chartFiles {
		r, ok := reports[c.benchmark]
		if !ok {
			continue
		}
		svg, err := c.draw(r).SVG()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		out = append(out, NamedSVG{Name: c.file, SVG: svg})
	}
	return out, nil
}

// NamedSVG is one chart and the file it goes to.
type NamedSVG struct {
	Name string
	SVG  []byte
}

// Colours of the Okabe–Ito palette, which stays distinct for the common
// kinds of colour blindness; grey for the floor a proxy is measured against.
var seriesColor = map[string]string{
	"direct":     "#8c8c8c",
	"goproxy":    "#56b4e9",
	"nginx":      "#009e73",
	"cproxy":     "#e69f00",
	LimitsTarget: "#d55e00",
	"routes":     "#cc79a7",
	// The floor and cproxy again, darker: on one CPU, or from the
	// benchmark's executable.
	OneCPUProxyTarget:  "#0072b2",
	OneCPUCproxyTarget: "#8a5a00",
	SharedProxyTarget:  "#000000",
}

// ran is the chart's series: the columns of the table that the run has.
func (r *Result) ran() []column {
	var cs []column
	for _, c := range columns {
		if slices.Contains(r.Targets, c.target) {
			cs = append(cs, c)
		}
	}
	return cs
}

func (r *Result) series() []chart.Series {
	var s []chart.Series
	for _, c := range r.ran() {
		s = append(s, chart.Series{Name: c.title, Color: seriesColor[c.target]})
	}
	return s
}

// bar is the median over the repetitions of f, with each repetition's value
// as a sample.
func (r *Result) bar(f func(Rep, string) (float64, bool), target string) chart.Bar {
	a := r.collect(f, target)
	if len(a) == 0 {
		return chart.Bar{Missing: true}
	}
	return chart.Bar{Value: a.median(), Samples: a}
}

func stat(measure string, f func(Stats) float64) func(Rep, string) (float64, bool) {
	return func(r Rep, target string) (float64, bool) {
		s, ok := r.Stats[measure][target]
		return f(s), ok
	}
}

func modelLatencyChart(rep *Report) *chart.Chart {
	r := rep.ModelRoute
	c := &chart.Chart{
		Title:   "Model route: time per request, lower is better",
		Note:    fmt.Sprintf("Non-streaming POST /v1/messages (22 KB), send to last byte; each panel its own scale. Bars: median of %d repetitions; dots: each (%s).", len(r.Reps), rep.Date.Format("2006-01-02")),
		Desc:    "Six panels of bars, the 50th, 90th and 99th percentile latency in microseconds, with 1 client and with 16 concurrent clients, of a direct connection and of each proxy; each panel has its own scale.",
		Series:  r.series(),
		Columns: 3,
	}
	for _, m := range []struct{ measure, title string }{{Latency1, "1 client"}, {Latency16, "16 clients"}} {
		for _, q := range []struct {
			label string
			f     func(Stats) time.Duration
		}{
			{"p50", func(s Stats) time.Duration { return s.P50 }},
			{"p90", func(s Stats) time.Duration { return s.P90 }},
			{"p99", func(s Stats) time.Duration { return s.P99 }},
		} {
			g := chart.Group{}
			for _, col := range r.ran() {
				g.Bars = append(g.Bars, r.bar(stat(m.measure, func(s Stats) float64 { return micros(q.f(s)) }), col.target))
			}
			c.Panels = append(c.Panels, chart.Panel{Title: q.label + ", " + m.title, Unit: "µs", Groups: []chart.Group{g}})
		}
	}
	return c
}

func modelThroughputChart(rep *Report) *chart.Chart {
	r := rep.ModelRoute
	c := &chart.Chart{
		Title:  "Model route: requests per second, higher is better",
		Note:   fmt.Sprintf("Non-streaming requests completed per second of wall time. Bars: median of %d repetitions; dots: each one (%s).", len(r.Reps), rep.Date.Format("2006-01-02")),
		Desc:   "Grouped bars of the requests per second a direct connection and each proxy completed, with 1 client and with 16 concurrent clients.",
		Series: r.series(),
	}
	p := chart.Panel{Unit: "requests per second"}
	for _, m := range []struct{ measure, title string }{{Latency1, "1 client"}, {Latency16, "16 clients"}} {
		g := chart.Group{Label: m.title}
		for _, col := range r.ran() {
			g.Bars = append(g.Bars, r.bar(stat(m.measure, func(s Stats) float64 { return s.PerSec }), col.target))
		}
		p.Groups = append(p.Groups, g)
	}
	c.Panels = append(c.Panels, p)
	return c
}

// ways are the two series of the git and npm charts.
var ways = []chart.Series{{Name: "direct", Color: seriesColor["direct"]}, {Name: "cproxy", Color: seriesColor["cproxy"]}}

// medianBar is the median of samples, each shown.
func medianBar(samples []float64) chart.Bar {
	if len(samples) == 0 {
		return chart.Bar{Missing: true}
	}
	return chart.Bar{Value: across(samples).median(), Samples: samples}
}

func gitChart(rep *Report) *chart.Chart {
	r := rep.GitClone
	reps := 0
	if len(r.Repos) > 0 {
		reps = len(r.Repos[0].times("direct"))
	}
	c := &chart.Chart{
		Title:  "git clone: throughput, higher is better",
		Note:   fmt.Sprintf("Pack MiB per second of a clone's wall time. Bars: median of %d clones per way; dots: each clone (%s).", reps, rep.Date.Format("2006-01-02")),
		Desc:   "Grouped bars of git clone throughput in MiB per second, directly and through cproxy, for each repository.",
		Series: ways,
	}
	p := chart.Panel{Unit: "MiB/s"}
	for _, rr := range r.Repos {
		g := chart.Group{Label: fmt.Sprintf("%s (%.0f MiB pack)", rr.Repo, mib(rr.PackBytes))}
		for _, w := range ways {
			var s []float64
			for _, t := range rr.times(w.Name) {
				s = append(s, mib(rr.PackBytes)/t.Seconds())
			}
			g.Bars = append(g.Bars, medianBar(s))
		}
		p.Groups = append(p.Groups, g)
	}
	c.Panels = append(c.Panels, p)
	return c
}

func npmChart(rep *Report) *chart.Chart {
	r := rep.NPMCI
	c := &chart.Chart{
		Title:  "npm: wall time, lower is better",
		Note:   fmt.Sprintf("%d packages from a local registry, empty cache each time. Bars: median; dots: each run (%s).", r.Installed, rep.Date.Format("2006-01-02")),
		Desc:   "Grouped bars of npm's wall time in seconds, directly and through cproxy: npm ci from a lockfile, and the making of each way's lockfile.",
		Series: ways,
		Format: func(v float64) string { return fmt.Sprintf("%.2f", v) },
	}
	p := chart.Panel{Unit: "seconds"}
	ci := chart.Group{Label: fmt.Sprintf("npm ci (%d runs per way)", len(r.times("direct")))}
	for _, w := range ways {
		var s []float64
		for _, t := range r.times(w.Name) {
			s = append(s, t.Seconds())
		}
		ci.Bars = append(ci.Bars, medianBar(s))
	}
	p.Groups = append(p.Groups, ci)
	if len(r.Locks) > 0 {
		lock := chart.Group{Label: "npm install --package-lock-only (1 run)"}
		for _, w := range ways {
			var s []float64
			for _, l := range r.Locks {
				if l.Way == w.Name {
					s = append(s, l.Time.Seconds())
				}
			}
			lock.Bars = append(lock.Bars, medianBar(s))
		}
		p.Groups = append(p.Groups, lock)
	}
	c.Panels = append(c.Panels, p)
	return c
}
