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
