// Package bench measures what cproxy costs on the request path, side by side
// with the floor for "a proxy that does nothing" on the same machine: a direct
// connection to a local upstream, a do-nothing httputil.ReverseProxy, and nginx
// as a plain reverse proxy, all in front of the same lean loopback upstream.
//
// Every proxy runs as its own process, so each one's CPU and memory are its
// own: the upstream and the do-nothing proxy are this package's code, started
// with CPROXY_BENCH_ROLE set (see RunRoleIfAsked), the upstream by
// re-executing the current binary (the client's) and the do-nothing proxy from
// a program of its own, cmd/benchproxy, so that no proxy shares its machine
// code with the client and the upstream; cproxy is the real `cproxy serve`
// binary with a minted sandbox token, so its whole path (authentication,
// store look-up, policy, the body's model check, forwarding) is measured. A second cproxy,
// LimitsTarget, runs with a metering budget, the JSON audit log to a file and
// its /metrics scraped every few seconds, and must show its token's
// usage moved by every request.
//
// Two entry points use it: `go test -bench . ./internal/bench` (Go benchmarks,
// including in-process ones for profiling routes.Server) and
// `go run ./internal/bench/cmd/benchreport`, which .ci/bench calls to print the
// comparison table of docs/benchmarks.md. With -json, benchreport also writes
// a Report (every number of the run, the machine, the versions), and
// `go run ./internal/bench/cmd/benchcharts` draws the SVG charts of
// docs/benchmarks.md from those reports (package chart draws them);
// .ci/bench-all does both. benchreport -store (.ci/bench-store) runs
// RunStore instead: cproxy on the embedded store against PostgreSQL with and
// without store.lookup_cache, and revocation across replicas;
// benchreport -store-size (.ci/bench-store-size) runs RunStoreSize: the
// embedded store with up to a million tokens, and a year of churn with and
// without pruning; benchreport -mcp (.ci/bench-mcp) runs RunMCP: the
// official Go SDK's client and server, directly and through cproxy's MCP
// route, tools/call and a filtered tools/list; benchreport -github
// (.ci/bench-github) runs RunGitHub: REST reads and gh pr view's GraphQL
// query directly to the fake GitHub API, through the do-nothing Go proxy
// and through cproxy, each proxy on every CPU and on one, and the real gh
// as a process; benchreport -mixed
// (.ci/bench-mixed) runs RunMixed: model streams, a large git clone and
// npm ci runs at once through one cproxy, at runtime.cpus 1 and 0 (every
// CPU), against the model streams alone. With Options.Before (and GitOptions.Before,
// NPMOptions.Before) an earlier build of cproxy runs beside the current one
// as one more target, cproxy@REV, at the same settings and in the same
// turns; .ci/bench-compare builds one from a git revision and runs the model
// route, git clone and npm ci so. Nothing here runs in the normal test suite beyond a few
// fast checks of the harness itself and of the reports and charts.
package bench
