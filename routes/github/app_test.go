package github

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

// appFixture is appTokens against the fake App endpoint and git server,
// on a clock the test moves.
type appFixture struct {
	tokens *appTokens
	app    *fakes.GitHubApp
	git    *fakes.GitServer
	mu     sync.Mutex
	now    time.Time
}

func (f *appFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *appFixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func newAppFixture(t *testing.T, repos ...string) *appFixture {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	gs, err := fakes.NewGitServer(t.TempDir(), fakes.GitServerOptions{Token: canaryGitHub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gs.Close)
	for _, r := range repos {
		if err := gs.CreateRepo(r); err != nil {
			t.Fatal(err)
		}
	}
	key, keyPEM, err := fakes.NewAppKey()
	if err != nil {
		t.Fatal(err)
	}
	f := &appFixture{git: gs, now: time.Now()}
	f.app = fakes.NewGitHubApp(fakes.GitHubAppOptions{AppID: 99, Key: key, Installation: 5, Account: "acme", Git: gs, Now: f.clock})
	t.Cleanup(f.app.Close)
	api, _ := url.Parse(f.app.URL)
	f.tokens = newAppTokens(&routes.App{ID: 99, Installation: 5, API: api, Key: keyLive(t, keyPEM)}, f.clock, slog.New(slog.DiscardHandler))
	return f
}

// keyLive holds keyPEM as a private key source does.
func keyLive(t *testing.T, keyPEM []byte) *secrets.Live {
	t.Setenv("CPX_TEST_APP_KEY", string(keyPEM))
	live, err := new(secrets.Loader).LiveKey("github.app", secrets.Source("env:CPX_TEST_APP_KEY"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func (f *appFixture) token(t *testing.T, sandbox, repo, access string) secrets.Secret {
	t.Helper()
	owner, name, _ := strings.Cut(repo, "/")
	tok, err := f.tokens.token(context.Background(), sandbox, owner, name, access)
	if err != nil {
		t.Fatalf("token for %s %s %s: %v", sandbox, repo, access, err)
	}
	return tok
}

// A token is kept for its sandbox and scope until five minutes before it
// expires, then minted again; each scope and each sandbox has its own.
func TestAppTokenCache(t *testing.T) {
	f := newAppFixture(t, "acme/app", "acme/lib")
	first := f.token(t, "conv-1", "acme/app", accessRead)
	if got := f.token(t, "conv-1", "Acme/App", accessRead); got != first {
		t.Error("a second request of the same scope minted again")
	}
	f.token(t, "conv-1", "acme/app", accessWrite)
	f.token(t, "conv-1", "acme/lib", accessRead)
	f.token(t, "conv-2", "acme/app", accessRead)
	want := []string{"repositories=app contents=read", "repositories=app contents=write", "repositories=lib contents=read", "repositories=app contents=read"}
	if got := fakes.MintLines(f.app.Mints()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mints:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The fake's tokens live an hour: kept until 55 minutes.
	f.advance(54*time.Minute + 59*time.Second)
	if got := f.token(t, "conv-1", "acme/app", accessRead); got != first {
		t.Error("minted again before the token's margin")
	}
	n := len(f.app.Mints())
	f.advance(time.Second)
	if got := f.token(t, "conv-1", "acme/app", accessRead); got == first {
		t.Error("a token past its margin was used")
	}
	if len(f.app.Mints()) != n+1 {
		t.Errorf("mints: %d, want %d", len(f.app.Mints()), n+1)
	}
	// The expired ones are dropped when the new one is kept.
	if held := f.tokens.held(); held != 1 {
		t.Errorf("%d tokens held, want 1", held)
	}
}

// Revoking a sandbox drops its tokens alone.
func TestAppTokenEndSandbox(t *testing.T) {
	f := newAppFixture(t, "acme/app")
	one := f.token(t, "conv-1", "acme/app", accessRead)
	two := f.token(t, "conv-2", "acme/app", accessRead)
	f.tokens.EndSandbox("conv-1")
	if got := f.token(t, "conv-1", "acme/app", accessRead); got == one {
		t.Error("a revoked sandbox's token was used again")
	}
	if got := f.token(t, "conv-2", "acme/app", accessRead); got != two {
		t.Error("another sandbox's token was dropped")
	}
	if n := len(f.app.Mints()); n != 3 {
		t.Errorf("mints: %d, want 3", n)
	}
}

// Requests of one scope at once share one mint.
func TestAppTokenSharedMint(t *testing.T) {
	f := newAppFixture(t, "acme/app")
	var wg sync.WaitGroup
	got := make([]secrets.Secret, 8)
	for i := range got {
		wg.Go(func() { got[i] = f.token(t, "conv-1", "acme/app", accessWrite) })
	}
	wg.Wait()
	for _, tok := range got[1:] {
		if tok != got[0] {
			t.Error("concurrent requests got different tokens")
		}
	}
	if n := len(f.app.Mints()); n != 1 {
		t.Errorf("mints: %d, want 1", n)
	}
}

// A failed mint is a refusal that says what failed and what to fix, and
// holds neither the key nor the JWT.
func TestAppTokenMintFails(t *testing.T) {
	f := newAppFixture(t, "acme/app")
	for _, tc := range []struct {
		repo, want string
	}{
		{"acme/missing", "cproxy: could not get a GitHub App token for acme/missing: GitHub answered 422 (\"There is at least one repository that does not exist or is not accessible to the parent installation.\"): the App's installation 5 may lack the repository or contents read permission; the operator must install the App on acme/missing and grant it Contents: read and write"},
		{"other/app", "cproxy: could not get a GitHub App token for other/app: the App's installation 5 gave a token for \"acme/app\", not for other/app: it is installed on another account; the operator must point upstream.github.installation_id at the installation on other, or leave it out to look the installation up per owner"},
	} {
		owner, name, _ := strings.Cut(tc.repo, "/")
		_, err := f.tokens.token(context.Background(), "conv-1", owner, name, accessRead)
		if status, _ := routes.Status(err); err == nil || routes.Message(err) != tc.want || status != http.StatusBadGateway {
			t.Errorf("%s: got %v (%d), want %s", tc.repo, err, status, tc.want)
		}
	}
	// A JWT signed with another key.
	_, otherPEM, err := fakes.NewAppKey()
	if err != nil {
		t.Fatal(err)
	}
	f.tokens.app.Key = keyLive(t, otherPEM)
	_, err = f.tokens.token(context.Background(), "conv-1", "acme", "app", accessRead)
	if err == nil || !strings.Contains(routes.Message(err), "GitHub refused the App's JWT with 401") {
		t.Errorf("another key: %v", err)
	}
	if msg := routes.Message(err); strings.Contains(msg, "eyJ") || strings.Contains(msg, "PRIVATE KEY") {
		t.Errorf("the refusal holds the JWT or the key: %s", msg)
	}
}

// The fake git server takes an App token for the repository and access it
// was minted for alone: GitHub's own narrowing, which holds even if
// cproxy's checks did not.
func TestAppTokenNarrowedByGitHub(t *testing.T) {
	f := newAppFixture(t, "acme/app", "acme/lib")
	read := f.token(t, "conv-1", "acme/app", accessRead)
	write := f.token(t, "conv-1", "acme/app", accessWrite)
	for _, tc := range []struct {
		tok    secrets.Secret
		path   string
		status int
	}{
		{read, "/acme/app.git/info/refs?service=git-upload-pack", http.StatusOK},
		{read, "/acme/lib.git/info/refs?service=git-upload-pack", http.StatusNotFound},
		{read, "/acme/app.git/info/refs?service=git-receive-pack", http.StatusForbidden},
		{write, "/acme/app.git/info/refs?service=git-receive-pack", http.StatusOK},
		{write, "/acme/lib.git/info/refs?service=git-receive-pack", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(http.MethodGet, f.git.URL+tc.path, nil)
		req.SetBasicAuth("x-access-token", tc.tok.Reveal())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
	}
}

// GitHub refusing a kept token (401 from git) drops it: the next request
// mints another.
func TestAppTokenRefusedByGitHub(t *testing.T) {
	f := newAppFixture(t, "acme/app")
	first := f.token(t, "conv-1", "acme/app", accessRead)
	req, _ := http.NewRequest(http.MethodGet, f.git.URL+"/acme/app.git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth("x-access-token", first.Reveal())
	err := f.tokens.checkResponse(&http.Response{StatusCode: http.StatusUnauthorized, Request: req})
	if status, _ := routes.Status(err); status != http.StatusBadGateway {
		t.Errorf("a 401 from git: %v", err)
	}
	if got := f.token(t, "conv-1", "acme/app", accessRead); got == first {
		t.Error("a token GitHub refused was sent again")
	}
	if n := len(f.app.Mints()); n != 2 {
		t.Errorf("mints: %d, want 2", n)
	}
}

// Without installation_id, the installation is looked up once per owner
// (GET /repos/OWNER/NAME/installation); an owner the App is not installed
// on is refused with the fix.
func TestAppTokenInstallationLookup(t *testing.T) {
	f := newAppFixture(t, "acme/app", "acme/lib")
	f.tokens.app.Installation = 0
	f.token(t, "conv-1", "acme/app", accessRead)
	f.token(t, "conv-1", "Acme/lib", accessWrite)
	if n := f.app.Lookups(); n != 1 {
		t.Errorf("look-ups: %d, want 1", n)
	}
	want := []string{"repositories=app contents=read", "repositories=lib contents=write"}
	if got := fakes.MintLines(f.app.Mints()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mints: %q", got)
	}
	_, err := f.tokens.token(context.Background(), "conv-1", "other", "app", accessRead)
	wantErr := `cproxy: could not get a GitHub App token for other/app: the GitHub App is not installed on other with access to it (GitHub answered 404 ("Not Found")): the operator must install the App on other`
	if routes.Message(err) != wantErr {
		t.Errorf("another owner: %v", err)
	}
}
