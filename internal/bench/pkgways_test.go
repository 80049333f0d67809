package bench

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPackageReports checks the tables of made-up pip and go results, and
// that their reports read back as written.
func TestPackageReports(t *testing.T) {
	use := map[string]CproxyUse{wayCproxy: {RSSStart: 20 << 20, Peak: 24 << 20, CPU: 200 * time.Millisecond},
		wayCproxyAge: {RSSStart: 20 << 20, Peak: 25 << 20, CPU: 300 * time.Millisecond}}
	pip := &PipResult{Projects: 41, Versions: 80, Installed: 41, Ways: pipWays, MinReleaseAge: "1d", Use: use,
		PipVersion: "23.0.1", PythonVersion: "3.11.2", Started: fixedDate, Took: time.Minute, Runs: []PipRun{
			{Way: wayDirect, Time: 4 * time.Second, Pages: 41, Metadata: 41, Wheels: 41},
			{Way: wayCproxy, Time: 5 * time.Second, Pages: 41, Metadata: 41, Wheels: 41, Proxied: 123},
			{Way: wayCproxyAge, Time: 4 * time.Second, Pages: 123, Metadata: 41, Wheels: 41, Proxied: 123},
		}}
	gomod := &GoModResult{Modules: 40, Versions: 79, Ways: goModWays, MinReleaseAge: "1d", Use: use, GoVersion: "go1.26.8",
		Started: fixedDate, Took: time.Minute, Runs: []GoModRun{
			{Way: wayDirect, Time: 200 * time.Millisecond, Info: 40, Mod: 40, Zip: 40, SumDB: 42},
			{Way: wayDirectTLS, Time: 225 * time.Millisecond, Info: 40, Mod: 40, Zip: 40, SumDB: 42},
			{Way: wayCproxy, Time: 250 * time.Millisecond, Info: 40, Mod: 40, Zip: 40, SumDB: 42, Proxied: 162},
			{Way: wayCproxyAge, Time: 200 * time.Millisecond, Info: 80, Mod: 40, Zip: 40, SumDB: 42, Proxied: 162},
		}}
	for _, c := range []struct {
		markdown func(io.Writer)
		wants    []string
	}{
		{pip.Markdown, []string{"| 1 | cproxy | 5.00 s | 0.00 s | 41 | 41 | 41 | 123 |",
			"| cproxy | direct | 4.00 s | 5.00 s | 0.800 (0.800–0.800) | ≥ 0.9 | **no** |", "| cproxy+age | direct | 4.00 s | 4.00 s | 1.000 (1.000–1.000) | ≥ 0.9 | yes |",
			"| cproxy+age | 20.0 MiB | 25.0 MiB | 0.300 s | 2439 µs |"}},
		{gomod.Markdown, []string{"| 1 | cproxy+age | 0.20 s | 0.00 s | 80 | 40 | 40 | 42 | 162 |",
			"| cproxy | direct | 0.20 s | 0.25 s | 0.800 (0.800–0.800) | ≥ 0.9 | **no** |",
			"| cproxy | direct-tls | 0.23 s | 0.25 s | 0.900 (0.900–0.900) | ≥ 0.9 | yes |"}},
	} {
		var b bytes.Buffer
		c.markdown(&b)
		for _, want := range c.wants {
			if !strings.Contains(b.String(), want) {
				t.Errorf("no %q in:\n%s", want, b.String())
			}
		}
	}
	for _, res := range []any{pip, gomod} {
		rep, err := NewReport(res, nil, "0.10 0.20 0.30")
		if err != nil {
			t.Fatal(err)
		}
		b, err := rep.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseReport(b)
		if err != nil {
			t.Fatalf("%s: %v", rep.Benchmark, err)
		}
		if !reflect.DeepEqual(back, rep) {
			t.Errorf("%s: read back %+v, wrote %+v", rep.Benchmark, back, rep)
		}
	}
	if _, err := ParseReport([]byte(`{"benchmark": "pip-install", "pip_install": {}, "go_mod_download": {}}`)); err == nil {
		t.Error("a report with two results was read")
	}
}
