package fakes

import (
	"os"
	"os/exec"
)

// ClaudeBinary finds Claude Code for tests: $CPROXY_TEST_CLAUDE (set by
// .ci/test, which installs it from npm), else claude on PATH. It returns ""
// when there is none; callers skip, except under CI=true, where a missing
// client is a failure.
func ClaudeBinary() string {
	if p := os.Getenv("CPROXY_TEST_CLAUDE"); p != "" {
		return p
	}
	if p, err := exec.LookPath("claude"); err == nil {
		return p
	}
	return ""
}

// NeedClient skips a test when the named client (git, npm) is not
// installed, except under CI=true, where that is a failure.
func NeedClient(t interface {
	Helper()
	Skip(...any)
	Fatal(...any)
}, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(name + " is not installed: .ci/run installs it")
	}
	t.Skip(name + " is not installed")
}
