package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestProblemAt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cproxy.toml")
	os.WriteFile(path, []byte("[listen]\nproxy = \"127.0.0.1:0\"\n\n[upstream.anthropic]\ncredential = \"env:NOPE\"\n"), 0o600)
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	got := c.ProblemAt("upstream.anthropic.credential", "not set").String()
	if want := path + ":5:14: upstream.anthropic.credential: not set"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// A default value has no place in the file.
	if got := c.ProblemAt("upstream.github.credential", "not set").String(); got != "upstream.github.credential: not set" {
		t.Errorf("default: got %q", got)
	}
	if got := Default().ProblemAt("listen.proxy", "busy").String(); got != "listen.proxy: busy" {
		t.Errorf("no file: got %q", got)
	}
}
