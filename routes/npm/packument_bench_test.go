package npm

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cproxy/cproxy/routes/routetest"
)

// benchPackument is a packument the size of @types/node's or typescript's
// on registry.npmjs.org: 6,000 versions of about 2.7 KB, each with the
// dependencies, dist and contributors such packages carry, then time, as
// the registry orders them. CPROXY_BENCH_PACKUMENT=FILE (with
// CPROXY_BENCH_PACKAGE=NAME, the package it is of) measures a real one
// instead, such as one from npm's cache (~/.npm/_cacache): its tarballs
// must be on https://registry.npmjs.org/.
func benchPackument(tb testing.TB) (raw []byte, name string) {
	if f := os.Getenv("CPROXY_BENCH_PACKUMENT"); f != "" {
		raw, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		return raw, os.Getenv("CPROXY_BENCH_PACKAGE")
	}
	const n = 6000
	ver := func(i int) string { return fmt.Sprintf("%d.%d.%d", 1+i/1000, i/10%100, i%10) }
	var contributors strings.Builder
	for i := range 16 {
		if i > 0 {
			contributors.WriteByte(',')
		}
		fmt.Fprintf(&contributors, `{"name":"Contributor Number %d","githubUsername":"contributor%d","url":"https://github.com/contributor%d"}`, i, i, i)
	}
	var b bytes.Buffer
	b.WriteString(`{"_id":"is-big","_rev":"812-0123456789abcdef","name":"is-big","dist-tags":{"latest":"` + ver(n-1) + `","next":"` + ver(n-2) + `"},"versions":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		m := fakeManifest("https://registry.npmjs.org", "is-big", ver(i), 0)
		fmt.Fprintf(&b, "%q:%s,\"contributors\":[%s]}", ver(i), m[:len(m)-1], contributors.String())
	}
	b.WriteString(`},"time":{"created":"2016-01-01T00:00:00.000Z","modified":"2026-11-30T00:00:00.000Z"`)
	start := time.Date(2016, 1, 2, 0, 0, 0, 0, time.UTC)
	for i := range n {
		fmt.Fprintf(&b, `,%q:%q`, ver(i), start.Add(time.Duration(i)*11*time.Hour).Format("2006-01-02T15:04:05.000Z"))
	}
	b.WriteString(`},"description":"A big package","readme":"","readmeFilename":"","license":"MIT"}`)
	return b.Bytes(), "is-big"
}

// benchPolicies are the profiles a packument is rewritten for: none (no
// version policy: tarballs and foreign dependencies only), a deny list,
// and a min_release_age, which decides every version by time.
const benchPolicies = `
[profile.deny]
packages = ["*"]
npm.deny = [{ package = "*", versions = "<1.5.0 || >=6.9.0", reason = "compromised" }]

[profile.age]
packages = ["*"]
npm.min_release_age = "30d"
`

// BenchmarkPackumentRewrite rewrites a 16 MB packument of 6,000 versions
// through rewritePackumentResponse to io.Discard, as the route does;
// "direct" only copies the same bytes, which is what a proxy that does not
// rewrite would cost. Run with -cpu 1: MB/s is then per CPU. The
// concurrent runs rewrite it eight at a time on the same CPUs: their
// ns/op is CPU per packument when -cpu 1.
func BenchmarkPackumentRewrite(b *testing.B) {
	raw, name := benchPackument(b)
	base, _ := url.Parse("https://registry.npmjs.org/")
	pol := routetest.MustPolicy(b, benchPolicies)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rws := []struct {
		name string
		rw   *npmRewrite
	}{
		{"plain", &npmRewrite{req: npmRequest{kind: npmPackument, name: name}, public: "http://127.0.0.1:8080"}},
		{"deny", &npmRewrite{req: npmRequest{kind: npmPackument, name: name}, public: "http://127.0.0.1:8080", profile: pol.Profiles["deny"], now: now}},
		{"age", &npmRewrite{req: npmRequest{kind: npmPackument, name: name}, public: "http://127.0.0.1:8080", profile: pol.Profiles["age"], now: now}},
	}
	b.Run("direct", func(b *testing.B) {
		defer reportCPU(b, len(raw), 1)()
		for b.Loop() {
			io.Copy(io.Discard, struct{ io.Reader }{bytes.NewReader(raw)})
		}
	})
	for _, c := range rws {
		b.Run(c.name, func(b *testing.B) {
			defer reportCPU(b, len(raw), 1)()
			for b.Loop() {
				rewriteToDiscard(b, raw, base, c.rw)
			}
		})
	}
	for _, c := range rws[:1] {
		b.Run(c.name+"-8-at-once", func(b *testing.B) {
			defer reportCPU(b, len(raw), 8)()
			for b.Loop() {
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() { rewriteToDiscard(b, raw, base, c.rw) })
				}
				wg.Wait()
			}
		})
	}
}

// reportCPU sets up b for per packuments of size bytes each op, and
// returns the function that reports, besides wall time, the process's CPU
// time (user and system, the collector's included) per packument and the
// MB/s that makes per CPU: on a shared machine wall time also counts the
// time others had the CPU.
func reportCPU(b *testing.B, size, per int) func() {
	b.SetBytes(int64(size * per))
	b.ReportAllocs()
	start := cpuTime()
	return func() {
		cpu := float64(cpuTime()-start) / float64(b.N*per)
		b.ReportMetric(cpu, "cpu-ns/packument")
		b.ReportMetric(float64(size)/cpu*1e3, "MB/s-per-CPU")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rewriteToDiscard(b *testing.B, raw []byte, base *url.URL, rw *npmRewrite) {
	body := packumentReaderFor(b, raw, base, rw)
	n, err := io.Copy(io.Discard, body)
	body.Close()
	if err != nil || n < int64(len(raw))/2 {
		b.Fatalf("%d bytes, %v", n, err)
	}
}
