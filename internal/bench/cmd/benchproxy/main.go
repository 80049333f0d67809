// Command benchproxy is the benchmark's do-nothing Go reverse proxy as a
// program of its own (and routes.Server's stand-in, with -profile). The
// benchmark starts it; it is not meant to be run by hand.
//
// Why a program of its own: run from the benchmark's executable, as it was
// until 2026-11-30, the do-nothing proxy ran the same machine code at the
// same addresses as the load generator and the upstream, which take turns
// with it on the same two cores. Its caches and branch predictors came warm
// from them, which no separate program (cproxy, nginx, or any real proxy) gets;
// the same proxy code measured 15-25 % slower from a binary of its own
// (docs/benchmarks.md, "Method"; the measurements are in its git history).
package main

import (
	"fmt"
	"os"

	"github.com/cproxy/cproxy/internal/bench"
)

func main() {
	bench.RunRoleIfAsked()
	fmt.Fprintln(os.Stderr, "benchproxy: the model route and GitHub API benchmarks start this program (bash .ci/bench, .ci/bench-github); it takes no arguments")
	os.Exit(2)
}
