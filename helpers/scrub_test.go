package helpers

import (
	"os/exec"
	"slices"
	"testing"
)

func TestScrubDropsRealCredentials(t *testing.T) {
	e, _, err := SandboxEnv(EnvOptions{ProxyURL: "http://h:1", Token: "cpx_t"})
	if err != nil {
		t.Fatal(err)
	}
	got := e.Scrub([]string{"PATH=/bin", "ANTHROPIC_API_KEY=sk-real", "GITHUB_TOKEN=ghp_real", "ANTHROPIC_AUTH_TOKEN=old", "ANTHROPIC_API_KEY_HINT=x"})
	want := []string{"PATH=/bin", "ANTHROPIC_AUTH_TOKEN=old", "ANTHROPIC_API_KEY_HINT=x"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestUnsetShell(t *testing.T) {
	e, _, err := SandboxEnv(EnvOptions{ProxyURL: "http://h:1", Token: "cpx_t", ClaudeAuth: ClaudeAuthOAuth})
	if err != nil {
		t.Fatal(err)
	}
	script := e.UnsetShell()
	s, _ := e.Shell()
	if err := exec.Command("sh", "-c", script+s+`echo "[$ANTHROPIC_API_KEY][$ANTHROPIC_AUTH_TOKEN][$CLAUDE_CODE_OAUTH_TOKEN]"`).Run(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script+s+`echo "[$ANTHROPIC_API_KEY][$ANTHROPIC_AUTH_TOKEN][$CLAUDE_CODE_OAUTH_TOKEN]"`)
	cmd.Env = []string{"ANTHROPIC_API_KEY=sk-real", "ANTHROPIC_AUTH_TOKEN=stale", "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "[][][cpx_t]\n" {
		t.Fatalf("got %q, %v", out, err)
	}
}
