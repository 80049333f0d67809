package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/builtin"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

const (
	sonnetPolicy = "[profile.default]\nmodels = [\"claude-sonnet-*\"]\n"
	opusPolicy   = "[profile.default]\nmodels = [\"claude-opus-*\"]\n"
)

// reloadFixture is a config whose policy file the test rewrites, a server
// on it, and the reloader serve would run.
type reloadFixture struct {
	dir, policyFile string
	srv             *routes.Server
	reloader        *policyReloader
	log             *testutil.Buffer
}

func newReloadFixture(t *testing.T, up routes.Upstream, store tokens.Store) *reloadFixture {
	t.Helper()
	f := &reloadFixture{dir: t.TempDir(), log: &testutil.Buffer{}}
	f.policyFile = filepath.Join(f.dir, "policy.toml")
	f.write(t, sonnetPolicy)
	cfgFile := filepath.Join(f.dir, "cproxy.toml")
	if err := os.WriteFile(cfgFile, []byte("policy = \"policy.toml\"\n[store]\npath = \"tokens.db\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadConfig(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(f.log, nil))
	f.srv = routes.New(routes.Options{Store: store, Policy: cfg.Rules, Routes: builtin.Kinds.Routes(map[string]routes.Upstream{"anthropic": up}, nil, "", log, nil), Logger: log})
	t.Cleanup(f.srv.Close)
	f.reloader = newPolicyReloader(cfg, f.srv, store, log)
	f.reloader.settle = time.Millisecond
	return f
}

// write replaces the policy file as an editor does: a new file renamed
// over the old one.
func (f *reloadFixture) write(t *testing.T, text string) {
	t.Helper()
	tmp := f.policyFile + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.policyFile); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyReloadInFlight: a streamed model request decided under the old
// policy is cut by a reload that refuses it, and so is the next request.
func TestPolicyReloadInFlight(t *testing.T) {
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	defer fake.Close()
	u, _ := url.Parse(fake.URL)
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "tokens.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tok, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := store.Create(context.Background(), tok.Hash(), tokens.Record{Sandbox: "conv-42", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	f := newReloadFixture(t, routes.Upstream{URL: u, Credential: secrets.New(canaryAPIKey), Auth: config.AuthAPIKey}, store)
	proxy := httptest.NewServer(f.srv.ProxyHandler())
	defer proxy.Close()
	post := func(stream bool) *http.Response {
		body := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]`
		if stream {
			body += `,"stream":true`
		}
		req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/v1/messages", strings.NewReader(body+"}"))
		req.Header.Set("X-Api-Key", tok.Reveal())
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	gate := fake.StallStreams(1) // after message_start
	held := post(true)
	defer held.Body.Close()
	if held.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(held.Body)
		t.Fatalf("streamed request: %d %s", held.StatusCode, b)
	}
	<-gate.Reached()

	f.write(t, opusPolicy)
	f.reloader.poll(context.Background()) // the change, seen once
	f.reloader.poll(context.Background()) // and again the same: loaded
	if f.log.Count(`msg="policy reloaded"`) != 1 {
		t.Fatalf("no reload:\n%s", f.log.String())
	}
	next := post(false)
	io.Copy(io.Discard, next.Body)
	next.Body.Close()
	if next.StatusCode != http.StatusForbidden {
		t.Errorf("request after the reload: %d, want 403", next.StatusCode)
	}

	rest, err := io.ReadAll(held.Body)
	if err == nil || strings.Contains(string(rest), "event: message_stop") {
		t.Errorf("the request in flight was not cut: %v\n%s", err, rest)
	}
	gate.Release()
}

// TestPolicyWatchDebounce: the watcher loads a change once the file has
// stayed the same for one look, tries each change once (an invalid policy
// is logged once, not at every look), and a SIGHUP after it has nothing to do.
func TestPolicyWatchDebounce(t *testing.T) {
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{})
	defer fake.Close()
	u, _ := url.Parse(fake.URL)
	f := newReloadFixture(t, routes.Upstream{URL: u}, nil)
	r := f.reloader
	refused, reloaded := `msg="policy reload refused`, `msg="policy reloaded"`

	// The first looks read the file serve started with: nothing to say.
	r.poll(context.Background())
	r.poll(context.Background())
	if n := f.log.Count("msg="); n != 0 {
		t.Fatalf("start:\n%s", f.log.String())
	}

	// Half written, then finished before the second look: never read half.
	f.write(t, "[profile.default]\nmodels = [")
	r.poll(context.Background())
	f.write(t, opusPolicy)
	r.poll(context.Background())
	r.poll(context.Background())
	if f.log.Count(refused) != 0 || f.log.Count(reloaded) != 1 {
		t.Fatalf("half-written file:\n%s", f.log.String())
	}

	// Invalid: logged once however many looks follow.
	f.write(t, "[profile.default]\nmodels = \"claude-*\"\n")
	for range 5 {
		r.poll(context.Background())
	}
	if f.log.Count(refused) != 1 || !strings.Contains(f.log.String(), "policy.toml:2:10: profile.default.models") {
		t.Fatalf("invalid file:\n%s", f.log.String())
	}
	// Removed: a change too, logged once.
	os.Remove(f.policyFile)
	for range 3 {
		r.poll(context.Background())
	}
	if f.log.Count(refused) != 2 {
		t.Fatalf("removed file:\n%s", f.log.String())
	}

	// Fixed; then SIGHUP finds it loaded already. A touch changes nothing.
	f.write(t, sonnetPolicy)
	r.poll(context.Background())
	r.poll(context.Background())
	r.load(context.Background(), "sighup")
	later := time.Now().Add(time.Minute)
	os.Chtimes(f.policyFile, later, later)
	r.poll(context.Background())
	r.poll(context.Background())
	if f.log.Count(reloaded) != 2 || f.log.Count(`msg="policy unchanged" `) != 1 || f.log.Count(refused) != 2 {
		t.Fatalf("fixed:\n%s", f.log.String())
	}
}

// TestPolicyReadTimeout: a policy file whose read does not return is
// refused after the read timeout, no second read is started while it
// hangs, and once it returns reloads work again. SIGHUP never waits.
func TestPolicyReadTimeout(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:9") // no request is sent
	f := newReloadFixture(t, routes.Upstream{URL: u}, nil)
	r := f.reloader
	r.readTimeout = time.Millisecond
	hang := make(chan struct{})
	r.readFile = func(name string) ([]byte, error) {
		<-hang
		return policy.ReadFile(name)
	}
	r.sighup()
	r.sighup() // one is pending already: not waited for
	f.write(t, opusPolicy)
	ctx := context.Background()
	r.load(ctx, "sighup")
	r.load(ctx, "sighup")
	if f.log.Count("took more than 1ms") != 1 || f.log.Count("has not returned yet") != 1 {
		t.Fatalf("hanging read:\n%s", f.log.String())
	}
	close(hang)
	r.readTimeout = time.Minute
	for r.stuck != nil {
		r.load(ctx, "sighup") // until the hung read has returned
	}
	if f.log.Count(`msg="policy reloaded"`) != 1 {
		t.Fatalf("after the read returned:\n%s", f.log.String())
	}
}

// TestPolicyReloadWarningIsCapped: a reload that moves more sandboxes than
// the warning names logs the first, in order of their ids, and counts the
// rest exactly: one line of bounded length however many sandboxes move.
func TestPolicyReloadWarningIsCapped(t *testing.T) {
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "tokens.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	u, _ := url.Parse("http://127.0.0.1:1") // never asked
	f := newReloadFixture(t, routes.Upstream{URL: u}, store)
	f.write(t, sonnetPolicy+"[profile.web]\nmodels = [\"claude-haiku-*\"]\n\n[[sandbox]]\nmatch = \"conv-*\"\nprofile = \"web\"\n")
	f.reloader.load(context.Background(), "sighup")

	const moved = policyMovedShown + 7
	now := time.Now()
	var want []string
	for i := moved; i >= 1; i-- {
		tok, err := tokens.New()
		if err != nil {
			t.Fatal(err)
		}
		sandbox := fmt.Sprintf("conv-%03d", i)
		if err := store.Create(context.Background(), tok.Hash(), tokens.Record{Sandbox: sandbox, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if i <= policyMovedShown {
			want = append([]string{sandbox + " (web -> default)"}, want...)
		}
	}
	f.write(t, sonnetPolicy)
	f.reloader.load(context.Background(), "sighup")
	line := fmt.Sprintf(`level=WARN msg="policy reload changes the profile of sandboxes with live tokens" sandboxes="%s, and 7 more"`+"\n", strings.Join(want, ", "))
	if f.log.Count(`msg="policy reloaded"`) != 2 || !strings.Contains(f.log.String(), line) {
		t.Fatalf("want the line\n%s\ngot:\n%s", line, f.log.String())
	}
}
