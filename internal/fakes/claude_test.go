package fakes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// claudeBinary finds Claude Code. Without it the test is skipped, except under CI=true, where a missing client is
// a failure.
func claudeBinary(t *testing.T) string {
	t.Helper()
	if p := fakes.ClaudeBinary(); p != "" {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Claude Code not found: .ci/test installs it and sets CPROXY_TEST_CLAUDE")
	}
	t.Skip("Claude Code not found: set CPROXY_TEST_CLAUDE or put claude on PATH (bash .ci/test installs it)")
	return ""
}

// runClaude runs `claude -p "say hi"` against baseURL with a fresh HOME and config directory and nothing from
// this process's environment but PATH. Stdin is /dev/null: an open, silent stdin makes claude -p wait 3 s for it.
func runClaude(t *testing.T, bin, baseURL, credential string) (stdout, stderr string, exitCode int) {
	t.Helper()
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", "say hi")
	cmd.Dir = home
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + baseURL,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		credential,
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exitErr, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), exitErr.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), 0
}

// TestClaudeCode runs the real Claude Code against the fake in each way cproxy can hand it a credential, and
// pins what it sends: one streamed POST /v1/messages?beta=true, nothing else.
func TestClaudeCode(t *testing.T) {
	bin := claudeBinary(t)
	for _, tc := range []struct {
		name       string
		opts       fakes.AnthropicOptions
		credential string
		authHeader string // the header that must carry the credential
		oauthBeta  bool   // whether anthropic-beta must list oauth-2025-04-20
	}{
		{"api key", fakes.AnthropicOptions{APIKey: testKey}, "ANTHROPIC_API_KEY=" + testKey, "X-Api-Key", false},
		{"oauth token", fakes.AnthropicOptions{OAuthToken: testToken}, "CLAUDE_CODE_OAUTH_TOKEN=" + testToken, "Authorization", true},
		// A bare bearer, with no oauth beta: what cproxy's model route receives from a sandbox.
		{"auth token", fakes.AnthropicOptions{}, "ANTHROPIC_AUTH_TOKEN=" + testToken, "Authorization", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, tc.opts)
			stdout, stderr, code := runClaude(t, bin, f.URL, tc.credential)
			if code != 0 || stdout != fakes.DefaultReply+"\n" || stderr != "" {
				t.Fatalf("exit %d\nstdout %q\nstderr %q", code, stdout, stderr)
			}
			reqs := f.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1: %+v", len(reqs), reqs)
			}
			r := reqs[0]
			var body struct {
				Model  string
				Stream bool
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			if r.Method != "POST" || r.Path != "/v1/messages" || r.RawQuery != "beta=true" || !body.Stream || body.Model == "" {
				t.Errorf("request %s %s?%s, stream %v, model %q", r.Method, r.Path, r.RawQuery, body.Stream, body.Model)
			}
			if r.Header.Get(tc.authHeader) == "" || r.Header.Get("Anthropic-Version") != "2023-06-01" || r.Header.Get("X-Claude-Code-Session-Id") == "" {
				t.Errorf("headers %v", r.Header)
			}
			if got := strings.Contains(r.Header.Get("Anthropic-Beta"), "oauth-2025-04-20"); got != tc.oauthBeta {
				t.Errorf("anthropic-beta %q: oauth beta present = %v, want %v", r.Header.Get("Anthropic-Beta"), got, tc.oauthBeta)
			}
		})
	}

	// ANTHROPIC_AUTH_TOKEN holding an OAuth token, sent straight to the API, fails: Claude Code adds the oauth beta
	// only for CLAUDE_CODE_OAUTH_TOKEN. This is why cproxy merges the beta in when its credential is OAuth.
	t.Run("auth token straight to an OAuth upstream", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, fakes.AnthropicOptions{OAuthToken: testToken})
		stdout, _, code := runClaude(t, bin, f.URL, "ANTHROPIC_AUTH_TOKEN="+testToken)
		if code == 0 || !strings.Contains(stdout, "OAuth authentication is currently not supported.") {
			t.Errorf("exit %d, stdout %q", code, stdout)
		}
	})
}
