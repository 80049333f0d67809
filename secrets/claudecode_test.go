package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const (
	canaryOAuth  = "sk-ant-oat01-canary-secrets-first-0123456789"
	canaryOAuth2 = "sk-ant-oat01-canary-secrets-second-9876543210"
	canaryRefr   = "sk-ant-ort01-canary-secrets-refresh-0123456789"
)

// claudeDir points CLAUDE_CONFIG_DIR at a new folder and returns the
// credentials file in it. The macOS Keychain comes first there, so these
// tests run elsewhere only: no test reads the real Keychain.
func claudeDir(t *testing.T) string {
	t.Helper()
	if runtime.GOOS == "darwin" {
		t.Skip("claude-code reads the macOS Keychain first; not tested there")
	}
	dir := t.TempDir()
	t.Setenv("CLAUDE_CONFIG_DIR", dir)
	return filepath.Join(dir, ".credentials.json")
}

// writeLogin writes a credentials file as Claude Code does.
func writeLogin(t *testing.T, path, token string, expires time.Time) {
	t.Helper()
	body := fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"refreshToken":%q,"expiresAt":%d,"scopes":["user:inference","user:profile"],"subscriptionType":"max"}}`,
		token, canaryRefr, expires.UnixMilli())
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func noCanary(t *testing.T, where, s string) {
	t.Helper()
	for _, c := range []string{canaryOAuth, canaryOAuth2, canaryRefr} {
		if strings.Contains(s, c) {
			t.Fatalf("%s holds a credential:\n%s", where, s)
		}
	}
}

func TestClaudeCodeFile(t *testing.T) {
	path := claudeDir(t)
	writeLogin(t, path, canaryOAuth, time.Now().Add(8*time.Hour))
	s, err := Source("claude-code").Load()
	if err != nil || s.Reveal() != canaryOAuth {
		t.Fatalf("got %v", err)
	}

	// Without CLAUDE_CONFIG_DIR: ~/.claude/.credentials.json.
	home := t.TempDir()
	t.Setenv("CLAUDE_CONFIG_DIR", "")
	t.Setenv("HOME", home)
	os.Mkdir(filepath.Join(home, ".claude"), 0o700)
	writeLogin(t, filepath.Join(home, ".claude", ".credentials.json"), canaryOAuth2, time.Now().Add(time.Hour))
	if s, err := Source("claude-code").Load(); err != nil || s.Reveal() != canaryOAuth2 {
		t.Fatalf("from HOME: got %v", err)
	}
}

func TestClaudeCodeErrors(t *testing.T) {
	path := claudeDir(t)
	for _, tt := range []struct {
		name, body string
		want       []string
	}{
		{"missing", "", []string{"no Claude Code login at " + path, "run claude on this machine", "claude setup-token"}},
		{"malformed", `{"claudeAiOauth":{"accessToken":"` + canaryOAuth + `"`, []string{path + " is not the JSON Claude Code writes", "log in"}},
		{"not an object", `["` + canaryOAuth + `"]`, []string{path + " is not the JSON"}},
		{"logged out", `{"mcpOAuth":{}}`, []string{path + " holds no claude.ai login", "run claude on this machine"}},
		{"no token", `{"claudeAiOauth":{"refreshToken":"` + canaryRefr + `","expiresAt":4102444800000}}`, []string{path + " has no usable access token"}},
		{"wrong type", `{"claudeAiOauth":{"accessToken":"` + canaryOAuth + `","expiresAt":"soon"}}`, []string{path + " is not the JSON"}},
		{"expired", fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"expiresAt":946684800000}}`, canaryOAuth),
			[]string{"the access token in " + path + " expired (at 2000-01-01T00:00:00Z)", "run claude on this machine", "claude setup-token"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(path)
			if tt.body != "" {
				os.WriteFile(path, []byte(tt.body), 0o600)
			}
			_, err := Source("claude-code").Load()
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			noCanary(t, "the error", err.Error())
			if errors.Is(err, ErrExpired) != (tt.name == "expired") {
				t.Errorf("errors.Is(ErrExpired) is wrong for %v", err)
			}
		})
	}
	if _, err := Source("claude-code:x").Load(); err == nil || !strings.Contains(err.Error(), "unknown credential source") {
		t.Errorf("claude-code:x: got %v", err)
	}
}

// clock is a settable time for Live.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestLive(t *testing.T, s Source, c *clock) (*Live, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l, err := new(Loader).live("anthropic", s, log, c.now, false)
	if err != nil {
		t.Fatal(err)
	}
	return l, &buf
}

func TestClaudeCodeExpiry(t *testing.T) {
	path := claudeDir(t)
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	writeLogin(t, path, canaryOAuth, c.t.Add(3*time.Hour))
	l, log := newTestLive(t, "claude-code", c)
	if s, err := l.Current(); err != nil || s.Reveal() != canaryOAuth {
		t.Fatalf("got %v", err)
	}
	if log.Len() != 0 {
		t.Fatalf("logged with hours left:\n%s", log)
	}

	// Under an hour left: one WARN, however many requests.
	c.t = c.t.Add(2*time.Hour + 30*time.Minute)
	for range 3 {
		if s, err := l.Current(); err != nil || s.Reveal() != canaryOAuth {
			t.Fatalf("near expiry: got %v", err)
		}
	}
	if n := strings.Count(log.String(), "level=WARN"); n != 1 || !strings.Contains(log.String(), `msg="claude-code token expires soon`) ||
		!strings.Contains(log.String(), "expires=2026-01-01T03:00:00Z left=30m0s") {
		t.Fatalf("want one expiry warning, got:\n%s", log)
	}

	// Expired: refused, with the reason; one ERROR.
	c.t = c.t.Add(time.Hour)
	for range 2 {
		_, err := l.Current()
		if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "claude-code: Claude Code's login on the cproxy host expired (at 2026-01-01T03:00:00Z): the operator must run claude there") {
			t.Fatalf("expired: got %v", err)
		}
		if strings.Contains(err.Error(), path) {
			t.Errorf("the error for the client names the host's file: %v", err)
		}
	}
	if n := strings.Count(log.String(), "level=ERROR"); n != 1 || !strings.Contains(log.String(), "login="+path) {
		t.Fatalf("want one expiry error naming the file, got:\n%s", log)
	}

	// Claude Code refreshes its login: the poll picks it up.
	writeLogin(t, path, canaryOAuth2, c.t.Add(8*time.Hour))
	l.poll()
	if s, err := l.Current(); err != nil || s.Reveal() != canaryOAuth2 {
		t.Fatalf("after the refresh: got %v", err)
	}
	if !strings.Contains(log.String(), `msg="claude-code login changed: using its new token"`) {
		t.Fatalf("no reload line:\n%s", log)
	}
	noCanary(t, "the log", log.String())
}

func TestClaudeCodeStartsExpiredOrClose(t *testing.T) {
	path := claudeDir(t)
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}

	// Close to expiry at start: warned at start, not again.
	writeLogin(t, path, canaryOAuth, c.t.Add(10*time.Minute))
	l, log := newTestLive(t, "claude-code", c)
	l.Current()
	if n := strings.Count(log.String(), "level=WARN"); n != 1 {
		t.Fatalf("want one warning, got:\n%s", log)
	}

	// Expired at start: no error (Claude Code may refresh it soon), but
	// logged, and refused.
	writeLogin(t, path, canaryOAuth, c.t.Add(-time.Minute))
	l, log = newTestLive(t, "claude-code", c)
	if !strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("no error at start:\n%s", log)
	}
	if _, err := l.Current(); !errors.Is(err, ErrExpired) {
		t.Fatalf("got %v", err)
	}
	noCanary(t, "the log", log.String())

	// Missing at start is an error.
	os.Remove(path)
	if _, err := new(Loader).Live("anthropic", "claude-code", nil); err == nil || !strings.Contains(err.Error(), "no Claude Code login at") {
		t.Fatalf("missing: got %v", err)
	}
}

// TestClaudeCodePoll: a rewrite is picked up; a broken rewrite keeps the
// token in force and is logged once; an unchanged file is not reread.
func TestClaudeCodePoll(t *testing.T) {
	path := claudeDir(t)
	c := &clock{t: time.Now()}
	writeLogin(t, path, canaryOAuth, c.t.Add(8*time.Hour))
	l, log := newTestLive(t, "claude-code", c)

	l.poll()
	if log.Len() != 0 {
		t.Fatalf("an unchanged file was reread:\n%s", log)
	}
	os.WriteFile(path, []byte(`{"claudeAiOauth":`), 0o600)
	l.poll()
	l.poll()
	if s, err := l.Current(); err != nil || s.Reveal() != canaryOAuth {
		t.Fatalf("a broken file replaced the token: %v", err)
	}
	if n := strings.Count(log.String(), "level=ERROR"); n != 1 || !strings.Contains(log.String(), "the previous token stays in force") {
		t.Fatalf("want one error, got:\n%s", log)
	}
	writeLogin(t, path, canaryOAuth2, c.t.Add(8*time.Hour))
	l.poll()
	if s, _ := l.Current(); s.Reveal() != canaryOAuth2 {
		t.Fatal("the new token was not picked up")
	}

	// Watch ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Watch(ctx); close(done) }()
	cancel()
	<-done
	noCanary(t, "the log", log.String())
}

// TestLiveReload: SIGHUP's Reload takes a file's new value; a source that
// fails keeps the one in force and logs why, never the value.
func TestLiveReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	os.WriteFile(path, []byte(canaryOAuth), 0o600)
	l, log := newTestLive(t, Source("file:"+path), &clock{t: time.Now()})

	os.WriteFile(path, []byte(canaryOAuth2), 0o600)
	l.Reload()
	if s, err := l.Current(); err != nil || s.Reveal() != canaryOAuth2 {
		t.Fatalf("reload: got %v", err)
	}
	if !strings.Contains(log.String(), `msg="credential reloaded" upstream=anthropic source=file:`+path+` changed=true`) {
		t.Fatalf("no reload line:\n%s", log)
	}

	os.Chmod(path, 0o644)
	l.Reload()
	os.Remove(path)
	l.Reload()
	if s, err := l.Current(); err != nil || s.Reveal() != canaryOAuth2 {
		t.Fatalf("a failed reload lost the credential: %v", err)
	}
	for _, w := range []string{"readable by group or others (mode 0644): run chmod 600 " + path, "no such file"} {
		if !strings.Contains(log.String(), `level=ERROR msg="credential reload failed; the previous credential stays in force" upstream=anthropic source=file:`+path) ||
			!strings.Contains(log.String(), w) {
			t.Fatalf("want an error saying %q, got:\n%s", w, log)
		}
	}
	noCanary(t, "the log", log.String())

	// env: is fixed for the process: nothing to reread, nothing logged.
	t.Setenv("CPROXY_TEST_LIVE", canaryOAuth)
	l, log = newTestLive(t, "env:CPROXY_TEST_LIVE", &clock{t: time.Now()})
	t.Setenv("CPROXY_TEST_LIVE", canaryOAuth2)
	l.Reload()
	if s, _ := l.Current(); s.Reveal() != canaryOAuth || log.Len() != 0 {
		t.Fatalf("env: reloaded:\n%s", log)
	}
}

func TestLiveReadable(t *testing.T) {
	// file: read again, with Load's checks; the credential in force stays.
	path := filepath.Join(t.TempDir(), "key")
	os.WriteFile(path, []byte(canaryOAuth), 0o600)
	l, _ := newTestLive(t, Source("file:"+path), &clock{t: time.Now()})
	if err := l.Readable(); err != nil {
		t.Fatalf("file: %v", err)
	}
	os.Chmod(path, 0o644)
	if err := l.Readable(); err == nil || !strings.Contains(err.Error(), "readable by group or others") {
		t.Fatalf("file mode 0644: got %v", err)
	}
	os.Remove(path)
	if err := l.Readable(); err == nil || err.Error() != "file:"+path+": no such file" {
		t.Fatalf("file removed: got %v", err)
	}
	if s, err := l.Current(); err != nil || s.Reveal() != canaryOAuth {
		t.Fatalf("the check changed the credential in force: %v", err)
	}

	// env: the environment does not change under a process.
	t.Setenv("CPROXY_TEST_LIVE", canaryOAuth)
	l, _ = newTestLive(t, "env:CPROXY_TEST_LIVE", &clock{t: time.Now()})
	t.Setenv("CPROXY_TEST_LIVE", "")
	if err := l.Readable(); err != nil {
		t.Fatalf("env: %v", err)
	}

	// keyring: the entry is still listed.
	k, cfg := fileKeyring(t, "pw")
	if err := k.Set("upstream-key", New(canaryOAuth)); err != nil {
		t.Fatal(err)
	}
	l, err := (&Loader{Keyring: cfg}).Live("anthropic", "keyring:upstream-key", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Readable(); err != nil {
		t.Fatalf("keyring: %v", err)
	}
	k.Remove("upstream-key")
	want := "keyring:upstream-key: no such entry in the file keyring at " + cfg.FileDir + ": run cproxy secret set upstream-key"
	if err := l.Readable(); !errors.Is(err, ErrNotFound) || err.Error() != want {
		t.Fatalf("keyring entry removed: got %v\nwant %s", err, want)
	}

	// claude-code: the token held has not expired.
	claude := claudeDir(t)
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	writeLogin(t, claude, canaryOAuth, c.t.Add(time.Hour))
	l, _ = newTestLive(t, "claude-code", c)
	if err := l.Readable(); err != nil {
		t.Fatalf("claude-code: %v", err)
	}
	c.t = c.t.Add(2 * time.Hour)
	if err := l.Readable(); !errors.Is(err, ErrExpired) {
		t.Fatalf("claude-code expired: got %v", err)
	}
}
