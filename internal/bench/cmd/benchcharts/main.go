// Command benchcharts draws the SVG charts of docs/benchmarks.md from the
// JSON reports benchreport -json wrote (model-route.json, git-clone.json,
// npm-ci.json in one directory), without running anything:
//
//	go run ./internal/bench/cmd/benchcharts -in docs/benchmarks -out docs/benchmarks
//
// A report that is not there leaves its charts as they are. The same reports
// give the same bytes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/cproxy/cproxy/internal/bench"
)

func main() {
	in := flag.String("in", "docs/benchmarks", "read the JSON reports from `DIR`")
	out := flag.String("out", "", "write the SVGs into `DIR` (default: -in)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "benchcharts: takes no arguments, got %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if *out == "" {
		*out = *in
	}
	if err := run(*in, *out); err != nil {
		fmt.Fprintf(os.Stderr, "benchcharts: %v\n", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	reports := map[string]*bench.Report{}
	for _, b := range slices.Sorted(maps.Keys(bench.ResultFiles)) {
		path := filepath.Join(in, bench.ResultFiles[b])
		r, err := bench.ReadReport(path)
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "benchcharts: no %s: its charts are left as they are\n", path)
			continue
		}
		if err != nil {
			return err
		}
		if r.Benchmark != b {
			return fmt.Errorf("%s: a %s report, not %s", path, r.Benchmark, b)
		}
		reports[b] = r
	}
	if len(reports) == 0 {
		return fmt.Errorf("no reports in %s", in)
	}
	svgs, err := bench.Charts(reports)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, s := range svgs {
		path := filepath.Join(out, s.Name)
		if err := os.WriteFile(path, s.SVG, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "benchcharts: wrote %s\n", path)
	}
	return nil
}
