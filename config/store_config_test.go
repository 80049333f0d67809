package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

func TestStoreConfig(t *testing.T) {
	c, probs := loadConfig("/etc/cproxy/cproxy.toml", []byte(`[store]
kind = "postgres"
dsn = "file:pg.dsn"
`), policy.ReadFile)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	if c.Store.Kind != StorePostgres || c.Store.DSN != "file:"+filepath.Join("/etc/cproxy", "pg.dsn") {
		t.Errorf("store = %+v; want kind postgres and the dsn file resolved", c.Store)
	}
	c, probs = loadConfig("cproxy.toml", []byte("[store]\nkind = \"postgres\"\ndsn = \"env:CPROXY_PG_DSN\"\n"), policy.ReadFile)
	if len(probs) > 0 || c.Store.DSN != "env:CPROXY_PG_DSN" {
		t.Errorf("env dsn: %+v %v", c.Store, probs)
	}
	if d := Default().Store; d.Kind != StoreBolt || d.DSN != "" || d.LookupCache.Duration != 0 {
		t.Errorf("default store = %+v; want bolt without a dsn or a look-up cache", d)
	}
	if c, probs := loadConfig("cproxy.toml", []byte("[store]\nkind = \"bolt\"\nlookup_cache = \"0s\"\n"), policy.ReadFile); len(probs) > 0 || c.Store.LookupCache.Duration != 0 {
		t.Errorf(`lookup_cache = "0s" with kind = "bolt" (the default, written out): %v`, probs)
	}
	for src, want := range map[string]time.Duration{`"30s"`: 30 * time.Second, `"0s"`: 0} {
		c, probs = loadConfig("cproxy.toml", []byte("[store]\nkind = \"postgres\"\ndsn = \"env:PG\"\nlookup_cache = "+src+"\n"), policy.ReadFile)
		if len(probs) > 0 || c.Store.LookupCache.Duration != want {
			t.Errorf("lookup_cache = %s: %v %v; want %v", src, c.Store.LookupCache, probs, want)
		}
	}
}

func TestStoreConfigProblems(t *testing.T) {
	const password = "SECRETpassword"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown kind", "[store]\nkind = \"mysql\"\n", []string{
			`cproxy.toml:2:8: store.kind: not a store kind (use "bolt" or "postgres")`,
		}},
		{"postgres without dsn", "[store]\nkind = \"postgres\"\n", []string{
			`cproxy.toml:2:8: store.dsn: kind = "postgres" needs the connection string's credential source (e.g. "env:CPROXY_PG_DSN")`,
		}},
		{"the connection string itself", "[store]\nkind = \"postgres\"\ndsn = \"postgres://cproxy:" + password + "@db:5432/cproxy\"\n", []string{
			`cproxy.toml:3:7: store.dsn: not a credential source (use "env:NAME", "file:PATH" or "keyring:NAME"; never the connection string itself, which holds the password)`,
		}},
		{"key=value string", "[store]\nkind = \"postgres\"\ndsn = \"host=db password=" + password + "\"\n", []string{
			`cproxy.toml:3:7: store.dsn: not a credential source (use "env:NAME", "file:PATH" or "keyring:NAME"; never the connection string itself, which holds the password)`,
		}},
		{"bad env name", "[store]\nkind = \"postgres\"\ndsn = \"env:1PG\"\n", []string{
			`cproxy.toml:3:7: store.dsn: env: needs an environment variable name: letters, digits and _, not starting with a digit (e.g. "env:GITHUB_TOKEN")`,
		}},
		{"claude-code", "[store]\nkind = \"postgres\"\ndsn = \"claude-code\"\n", []string{
			`cproxy.toml:3:7: store.dsn: not a credential source (use "env:NAME", "file:PATH" or "keyring:NAME"; never the connection string itself, which holds the password)`,
		}},
		{"path with postgres", "[store]\nkind = \"postgres\"\ndsn = \"env:PG\"\npath = \"x.db\"\n", []string{
			`cproxy.toml:4:8: store.path: only for kind = "bolt" (kind = "postgres" keeps tokens in the database store.dsn names)`,
		}},
		{"dsn with bolt", "[store]\ndsn = \"env:PG\"\n", []string{
			`cproxy.toml:2:7: store.dsn: only for kind = "postgres" (the embedded store is a file: store.path)`,
		}},
		{"lookup_cache with bolt", "[store]\nkind = \"bolt\"\nlookup_cache = \"30s\"\n", []string{
			`cproxy.toml:3:16: store.lookup_cache: only for kind = "postgres" (the embedded store keeps its records in memory already): remove it, or set kind = "postgres"`,
		}},
		{"negative lookup_cache", "[store]\nkind = \"postgres\"\ndsn = \"env:PG\"\nlookup_cache = \"-1s\"\n", []string{
			`cproxy.toml:4:16: store.lookup_cache: must not be negative (e.g. "30s"; "0s" is no cache)`,
		}},
		{"lookup_cache not a duration", "[store]\nkind = \"postgres\"\ndsn = \"env:PG\"\nlookup_cache = \"30\"\n", []string{
			`cproxy.toml:4:16: store.lookup_cache: "30" is not a duration (e.g. "30s", "10m", "1h30m")`,
		}},
		{"negative retention", "[store]\nretention = \"-1h\"\n", []string{
			`cproxy.toml:2:13: store.retention: must not be negative (e.g. "720h", 30 days; "0s" keeps every token)`,
		}},
		{"lookup_cache empty", "[store]\nkind = \"postgres\"\ndsn = \"env:PG\"\nlookup_cache = \"\"\n", []string{
			`cproxy.toml:4:16: store.lookup_cache: "" is not a duration (e.g. "30s", "10m", "1h30m")`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, probs := loadConfig("cproxy.toml", []byte(tt.src), policy.ReadFile)
			got := make([]string, len(probs))
			for i, pr := range probs {
				got[i] = pr.String()
				if strings.Contains(got[i], password) {
					t.Errorf("a problem echoes the password: %s", got[i])
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestStoreRetention(t *testing.T) {
	if d := Default().Store.Retention.Duration; d != 30*24*time.Hour {
		t.Errorf("default store.retention = %v; want 720h (30 days)", d)
	}
	for src, want := range map[string]time.Duration{`"168h"`: 7 * 24 * time.Hour, `"0s"`: 0} {
		c, probs := loadConfig("cproxy.toml", []byte("[store]\nretention = "+src+"\n"), policy.ReadFile)
		if len(probs) > 0 || c.Store.Retention.Duration != want {
			t.Errorf("retention = %s: %v %v; want %v", src, c.Store.Retention, probs, want)
		}
	}
}
