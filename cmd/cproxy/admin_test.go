package main

// The CLI's check that an admin URL a config gave is that config's cproxy
// serve, against admin APIs that answer GET /healthz as cproxy serve does,
// as an older cproxy does, and as something else does. Two real serves are
// in testdata/script/token_admin_url.txt.

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/config"
)

// checkerFor is the check newAdminClient puts before the first call of an
// admin client of cfg, at an admin API that answers GET /healthz with
// healthz (ADDR and PORT its own address and port; "": 404), which cfg's
// listen.admin names.
func checkerFor(t *testing.T, cfg *config.Config, healthz string) (*serveChecker, *bytes.Buffer) {
	t.Helper()
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || healthz == "" {
			http.NotFound(w, r)
			return
		}
		addr := strings.TrimPrefix(ts.URL, "http://")
		_, port, _ := strings.Cut(addr, ":")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(strings.NewReplacer("ADDR", addr, "PORT", port).Replace(healthz)))
	}))
	t.Cleanup(ts.Close)
	cfg.Listen.Admin = strings.TrimPrefix(ts.URL, "http://")
	var stderr bytes.Buffer
	return &serveChecker{next: http.DefaultTransport, base: ts.URL, from: "--config " + cfg.Path, cfg: cfg, stderr: &stderr}, &stderr
}

func TestServeChecker(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cproxy.toml")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	cfg := func() *config.Config { c := config.Default(); c.Path = path; return c }
	for _, c := range []struct {
		name, healthz string
		refused       string // "": the check passes
		stderr        string
	}{
		{"this config", `{"status":"ok","config":"` + path + `","admin":"ADDR","proxy":"127.0.0.1:8080","pid":7}`, "", ""},
		{"this config, by a link", `{"status":"ok","config":"` + link + `","admin":"ADDR","pid":7}`, "", ""},
		{"this config, on a wildcard address", `{"status":"ok","config":"` + path + `","admin":"0.0.0.0:PORT","pid":7}`, "", ""},
		{"another config", `{"status":"ok","config":"/etc/cproxy/other.toml","admin":"ADDR","pid":7}`,
			"is a cproxy serve of /etc/cproxy/other.toml (pid 7), not of " + path + ": nothing done", ""},
		{"the embedded defaults", `{"status":"ok","config":"embedded default","admin":"ADDR","pid":7}`,
			"is a cproxy serve of the embedded default config (pid 7), not of " + path, ""},
		{"this config on another listener", `{"status":"ok","config":"` + path + `","admin":"127.0.0.1:1","pid":7}`,
			"but it listens on 127.0.0.1:1, not on ", ""},
		{"an older cproxy", `{"status":"ok"}`, "", "does not say which config it serves (an older cproxy): not checked that it is cproxy serve --config " + path},
		{"not cproxy", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, stderr := checkerFor(t, cfg(), c.healthz)
			err := sc.check(context.Background())
			var wrong *wrongServe
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("check: %v, want it to pass", err)
			case c.refused != "" && (!errors.As(err, &wrong) || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("check: %v, want a refusal with %q", err, c.refused)
			}
			if !strings.Contains(stderr.String(), c.stderr) || (c.stderr == "" && stderr.Len() > 0) {
				t.Errorf("stderr %q, want %q", stderr, c.stderr)
			}
		})
	}
}
