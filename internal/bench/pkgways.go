package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// What the pip install and go mod download benchmarks share: a client run
// in turns directly and through two cproxy processes, one with the
// route's min_release_age and one without, each way's wall times compared
// with direct's, and each cproxy's memory and CPU.

// The ways of the package benchmarks.
const (
	wayDirect = "direct"
	wayCproxy = "cproxy"
	// wayCproxyAge is cproxy with a min_release_age in the route's policy,
	// which makes it read each version's release time from the upstream
	// before it serves a file of it.
	wayCproxyAge = "cproxy+age"
	// wayDirectTLS is direct over HTTPS, for go, which reaches cproxy
	// over HTTPS only.
	wayDirectTLS = "direct-tls"
)

// throughCproxy are the ways through a cproxy.
var throughCproxy = []string{wayCproxy, wayCproxyAge}

// pkgMinReleaseAge is wayCproxyAge's min_release_age; every release in the
// fakes is 30 days old, so it hides none.
const pkgMinReleaseAge = "1d"

// auditLines counts the request records in the way's cproxy log whose
// route is route: the requests cproxy answered.
func (w *cproxyWay) auditLines(route string) (int, error) {
	b, err := os.ReadFile(w.proc.log)
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte("msg=request route="+route+" ")), nil
}

// pkgRatioTable writes, for each way of ways and each way in bases, the
// median wall times and the ratio base ÷ way (the way's speed as a
// fraction of the base's), with the range of the rounds' ratios. The
// target, 0.9 of direct's speed, is judged against the direct ways only;
// against a do-nothing proxy the ratio is reported.
func pkgRatioTable(w io.Writer, ways, bases []string, times func(way string) []time.Duration) {
	fmt.Fprintln(w, "| way | against | its median | way's median | against ÷ way wall time, median (range of rounds) | target | met |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|---|---|")
	for _, way := range ways {
		for _, base := range bases {
			d, c := times(base), times(way)
			ratio, lo, hi := speedRatio(d, c)
			target, met := "≥ 0.9", yesNo(ratio >= 0.9)
			if !strings.HasPrefix(base, wayDirect) {
				target, met = "report", ""
			}
			fmt.Fprintf(w, "| %s | %s | %.2f s | %.2f s | %.3f (%.3f–%.3f) | %s | %s |\n",
				way, base, median(d).Seconds(), median(c).Seconds(), ratio, lo, hi, target, met)
		}
	}
	fmt.Fprintln(w)
}

// pkgUseTable writes each proxy's memory and CPU: per client run and per
// request it answered (proxied, over all its runs).
func pkgUseTable(w io.Writer, client string, ways []string, use map[string]CproxyUse, runs, proxied func(way string) int) {
	fmt.Fprintf(w, "| way | proxy RSS at start | proxy peak RSS (VmHWM), whole run | proxy CPU per %s | per request it answered |\n", client)
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|")
	for _, way := range ways {
		u, ok := use[way]
		if !ok {
			continue
		}
		per := u.CPU / time.Duration(max(runs(way), 1))
		var perReq time.Duration
		if n := proxied(way); n > 0 {
			perReq = u.CPU / time.Duration(n)
		}
		fmt.Fprintf(w, "| %s | %.1f MiB | %.1f MiB | %.3f s | %d µs |\n", way, mib(u.RSSStart), mib(u.Peak), per.Seconds(), perReq.Microseconds())
	}
}
