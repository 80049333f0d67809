package config

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/policy"
)

func problemStrings(ps policy.Problems, dir string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = strings.TrimPrefix(p.String(), dir+string(filepath.Separator))
	}
	return out
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good-policy.toml"), webPolicy)
	writeFile(t, filepath.Join(dir, "bad-policy.toml"), `[profile.web]
models = ["claude-*"]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"] },
  { repo = "acme/*-docs", acess = "read" },
]

[[sandbox]]
match = "conv-*"
profile = "webb"
`)
	writeFile(t, filepath.Join(dir, "good-config.toml"), `policy = "good-policy.toml"
[listen]
proxy = "127.0.0.1:0"
`)
	writeFile(t, filepath.Join(dir, "config-with-broken-policy.toml"), `policy = "bad-policy.toml"

[listen]
proxy = "localhost"
`)
	writeFile(t, filepath.Join(dir, "empty.toml"), "# just a comment\n")
	writeFile(t, filepath.Join(dir, "unrelated.toml"), "name = \"x\"\n[profiles.web]\n")
	writeFile(t, filepath.Join(dir, "syntax.toml"), "[profile.web\n")
	// A config that sets only a table other than the first five is still a config.
	writeFile(t, filepath.Join(dir, "runtime-only.toml"), "[runtime]\ncpus = -2\n")

	tests := []struct {
		file string
		want []string
	}{
		{"good-policy.toml", nil},
		{"good-config.toml", nil},
		{"bad-policy.toml", []string{
			`bad-policy.toml:5:27: unknown key "acess" in a profile.web.repos entry (did you mean "access"?)`,
			`bad-policy.toml:10:11: sandbox.profile: no profile "webb" in this file (add [profile.webb] or use one of: web)`,
		}},
		{"config-with-broken-policy.toml", []string{
			`config-with-broken-policy.toml:4:9: listen.proxy: "localhost" is not host:port (e.g. "127.0.0.1:8080")`,
			`bad-policy.toml:5:27: unknown key "acess" in a profile.web.repos entry (did you mean "access"?)`,
			`bad-policy.toml:10:11: sandbox.profile: no profile "webb" in this file (add [profile.webb] or use one of: web)`,
		}},
		{"empty.toml", []string{
			`empty.toml:1:1: empty: a config has policy, [listen], [store], [upstream] or [log]; a policy has [profile.NAME] and [[sandbox]]`,
		}},
		{"unrelated.toml", []string{
			`unrelated.toml:1:1: unknown key "name" (neither a config key (approvals, claude, console, keyring, listen, log, mcp, policy, policy_settle, relay, runtime, store, upstream) nor a policy key (profile, sandbox))`,
			`unrelated.toml:2:2: unknown key "profiles" (did you mean "profile"?)`,
		}},
		{"runtime-only.toml", []string{
			`runtime-only.toml:2:8: runtime.cpus: -2 is not a number of CPUs (use 1 to 1024, or 0 for as many as Go would use)`,
		}},
		{"syntax.toml", []string{`syntax.toml:1:13: invalid TOML: expected '.' or ']' to end table name, but got '\n' instead`}},
		{"missing.toml", []string{`missing.toml: cannot read: no such file or directory`}},
	}
	for _, tt := range tests {
		got := problemStrings(Check(filepath.Join(dir, tt.file)), dir)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Check(%s):\ngot:\n%s\nwant:\n%s", tt.file, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
}

// TestConfigKeys: the policy package's list of the config's top-level keys,
// which Check and a policy file's "that is a config key" hint use, is
// Config's.
func TestConfigKeys(t *testing.T) {
	var keys []string
	for f := range reflect.TypeFor[Config]().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("toml"), ","); f.IsExported() && name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, policy.ConfigKeys) {
		t.Errorf("Config's keys are %v; policy.ConfigKeys says %v", keys, policy.ConfigKeys)
	}
}
