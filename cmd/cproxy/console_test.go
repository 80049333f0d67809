package main

// The console in a real browser: headless Chromium, driven by chromedp,
// against the real `cproxy serve` with sandboxes whose clients make real
// requests (the Anthropic SDK, git). One browser for the whole test.
// With CPROXY_SCREENSHOTS=DIR it saves the console's main views there as
// PNG files (docs/console/ holds the ones docs/console.md shows).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/chromedp/chromedp"

	"github.com/cproxy/cproxy/internal/testutil"
)

// consolePolicy lets every sandbox use the Claude models, ten requests a
// day, and push acme/app's agent/* branches, main with an approval.
const consolePolicy = `
[profile.default]
models = ["claude-*"]
repos = [{ repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], ask = ["refs/heads/main"] }]

[profile.default.budget]
requests = 10
window = "day"
`

// chromiumPath is the Chromium the browser tests drive. Outside CI a
// missing one skips them; CI installs it (.ci/clients).
func chromiumPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed: " + installHint("chromium"))
		}
		t.Skip("chromium is not installed (" + installHint("chromium") + ")")
	}
	return path
}

// browser starts one headless Chromium for t, with a profile of its own
// and nothing that reaches out to Google, and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	// Chromium puts its singleton socket in TMPDIR, and refuses to start
	// when that path is longer than a socket's: a short folder of its own,
	// whatever TMPDIR is.
	tmp := testutil.SocketDir(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Env("TMPDIR=" + tmp),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium")),
		chromedp.WindowSize(1280, 1000),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first call starts the browser, which lives as long as its
	// context: no timeout on that one.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	// A test that goes wrong ends rather than hangs.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)
	return ctx
}

// screenshot saves the page as DIR/NAME.png when CPROXY_SCREENSHOTS=DIR.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("CPROXY_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// gitAs runs git in dir as a sandbox with token tok would, through cproxy's
// github route, and returns what it printed.
func gitAs(t *testing.T, dir, tok string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "http.extraHeader=Authorization: Bearer " + tok}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.com", "GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@example.com")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// click clicks the button sel selects and returns the message the page
// it leads to shows.
func click(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.CSS("#flash"))); err != nil {
		t.Fatalf("clicking %s: %v", sel, err)
	}
	flash, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#flash")))
	if err != nil {
		t.Fatal(err)
	}
	return flash
}

var approvalIDRE = regexp.MustCompile(`apr_[0-9a-f]{16}`)

// pushNeedsApproval pushes HEAD to main, which the policy asks about, and
// returns the id of the approval request the refusal names.
func pushNeedsApproval(t *testing.T, app, tok string) string {
	t.Helper()
	out, err := gitAs(t, app, tok, "push", "origin", "HEAD:main")
	id := approvalIDRE.FindString(out)
	if err == nil || !strings.Contains(out, "needs approval") || id == "" {
		t.Fatalf("push to main: %v\n%s", err, out)
	}
	return id
}

func TestConsoleInBrowser(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	ctx := browser(t)
	_, gs, dir := inflightConfig(t, consolePolicy, "")
	if err := gs.CreateRepo("acme/app"); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, dir)
	agent, pusher := s.mint("conv-7"), s.mint("conv-42")
	model := sdkClient(s.proxy, option.WithAPIKey(agent))
	if _, err := model.Messages.New(context.Background(), helloParams()); err != nil {
		t.Fatalf("a model request: %v", err)
	}

	// The sandboxes, with their tokens and their use of the budget.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.admin+"/"), chromedp.WaitVisible(chromedp.CSS("#sandbox-conv-7"))); err != nil {
		t.Fatal(err)
	}
	sandboxes, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#sandboxes")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"conv-7", "conv-42", "tok_", "requests 1 / 10"} {
		if !strings.Contains(sandboxes, want) {
			t.Errorf("the sandboxes list lacks %q:\n%s", want, sandboxes)
		}
	}

	// A refusal appears as it happens, on the page already open.
	bad := helloParams()
	bad.Model = "gpt-live"
	if _, err := model.Messages.New(context.Background(), bad); err == nil {
		t.Fatal("a model the policy does not allow was served")
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//tbody[@id="rows"]/tr[@class="deny"]//code[contains(., "gpt-live")]`))); err != nil {
		t.Fatalf("the refusal did not appear live: %v", err)
	}

	// A push to main waits for an approval, which the console shows.
	work := t.TempDir()
	if out, err := gitAs(t, work, pusher, "clone", "-q", s.proxy+"/github/acme/app", "app"); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	app := filepath.Join(work, "app")
	if out, err := gitAs(t, app, pusher, "commit", "-q", "--allow-empty", "-m", "fix main"); err != nil {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	fix, _ := gitAs(t, app, pusher, "rev-parse", "HEAD")
	fix = strings.TrimSpace(fix)
	approve := pushNeedsApproval(t, app, pusher)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.admin+"/"), chromedp.WaitVisible(chromedp.CSS("#approval-"+approve))); err != nil {
		t.Fatal(err)
	}
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "console")
	for _, secret := range []string{agent, pusher, "cpx_", canaryAPIKey, canaryGitHub} {
		if strings.Contains(html, secret) {
			t.Errorf("the page holds a secret (%.8s…)", secret)
		}
	}
	// Approved in the browser, the retried push goes through.
	flash := click(t, ctx, "#approval-"+approve+" button.approve")
	if flash != "approved "+approve {
		t.Errorf("after approving: %q", flash)
	}
	if out, err := gitAs(t, app, pusher, "push", "origin", "HEAD:main"); err != nil {
		t.Fatalf("the approved push, retried: %v\n%s", err, out)
	}
	if got := gs.Ref("acme/app", "refs/heads/main"); got != fix {
		t.Fatalf("main is %s after the approved push, want %s", got, fix)
	}

	// Denied in the browser, the push stays refused.
	if out, err := gitAs(t, app, pusher, "commit", "-q", "--allow-empty", "-m", "again"); err != nil {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	deny := pushNeedsApproval(t, app, pusher)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.admin+"/"), chromedp.WaitVisible(chromedp.CSS("#approval-"+deny))); err != nil {
		t.Fatal(err)
	}
	flash = click(t, ctx, "#approval-"+deny+" button.deny")
	if flash != "denied "+deny {
		t.Errorf("after denying: %q", flash)
	}
	if out, err := gitAs(t, app, pusher, "push", "origin", "HEAD:main"); err == nil || !strings.Contains(out, "was denied by an operator (request "+deny+")") {
		t.Fatalf("the denied push, retried: %v\n%s", err, out)
	}
	if got := gs.Ref("acme/app", "refs/heads/main"); got != fix {
		t.Fatalf("main moved to %s after a denial", got)
	}

	// On a phone's screen.
	if os.Getenv("CPROXY_SCREENSHOTS") != "" {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(s.admin+"/"), chromedp.WaitVisible(chromedp.CSS("#sandboxes"))); err != nil {
			t.Fatal(err)
		}
		screenshot(t, ctx, "console-phone")
		if err := chromedp.Do(ctx, chromedp.EmulateReset()); err != nil {
			t.Fatal(err)
		}
	}

	// Revoked in the browser, the sandbox's next request is refused.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.admin+"/"), chromedp.WaitVisible(chromedp.CSS("#sandbox-conv-7"))); err != nil {
		t.Fatal(err)
	}
	flash = click(t, ctx, "#sandbox-conv-7 button[name=revoke]")
	if flash != "revoked sandbox conv-7" {
		t.Errorf("after revoking: %q", flash)
	}
	var apiErr *anthropic.Error
	if _, err := model.Messages.New(context.Background(), helloParams()); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the revoked sandbox's request: %v", err)
	}

	// Another site's page, in the same browser, submits a form to the
	// console: refused, and conv-42 stays live. It is 127.0.0.1 on another
	// port, the same site, so the browser sends the session's cookie: the
	// Origin is what refuses it.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/console/revoke"><input name="sandbox" value="conv-42"></form><script>document.forms[0].submit()</script>`, s.admin)
	}))
	t.Cleanup(evil.Close)
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.Search(`//body[contains(., "cross-origin request refused")]`))); err != nil {
		t.Errorf("another site's form in the browser: %v", err)
	}
	// A name that rebinds to the listener is refused.
	host := strings.TrimPrefix(s.admin, "http://")
	req, _ := http.NewRequest(http.MethodGet, s.admin+"/", nil)
	req.Host = "rebound.example:" + host[strings.LastIndex(host, ":")+1:]
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a rebinding Host: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	if out, err := gitAs(t, app, pusher, "ls-remote", "origin", "main"); err != nil || !strings.Contains(out, fix) {
		t.Errorf("conv-42 after the refused post: %v\n%s", err, out)
	}
}
