package routes

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
	"github.com/cproxy/cproxy/secrets"
)

// appFixture is appTokens against the fake App endpoint and git server,
// on a clock the test moves.
type appFixture struct {
	tokens *AppTokens
	app    *fakes.GitHubApp
	git    *fakes.GitServer
	testClock
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
	f := &appFixture{git: gs, testClock: testClock{now: time.Now()}}
	f.app = fakes.NewGitHubApp(fakes.GitHubAppOptions{AppID: 99, Key: key, Installation: 5, Account: "acme", Git: gs, Now: f.Now})
	t.Cleanup(f.app.Close)
	api, _ := url.Parse(f.app.URL)
	f.tokens = NewAppTokens(&App{ID: 99, Installation: 5, API: api, Key: keyLive(t, keyPEM)}, f.Now, slog.New(slog.DiscardHandler))
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
	tok, err := f.tokens.Token(context.Background(), sandbox, contentsScope(owner, name, access))
	if err != nil {
		t.Fatalf("token for %s %s %s: %v", sandbox, repo, access, err)
	}
	return tok
}

// A token is kept for its sandbox and scope until five minutes before it
// expires, then minted again; each scope and each sandbox has its own.
func TestAppTokenCache(t *testing.T) {
	f := newAppFixture(t, "acme/app", "acme/lib")
	first := f.token(t, "conv-1", "acme/app", "read")
	if got := f.token(t, "conv-1", "Acme/App", "read"); got != first {
		t.Error("a second request of the same scope minted again")
	}
	f.token(t, "conv-1", "acme/app", "write")
	f.token(t, "conv-1", "acme/lib", "read")
	f.token(t, "conv-2", "acme/app", "read")
	want := []string{"repositories=app contents=read", "repositories=app contents=write", "repositories=lib contents=read", "repositories=app contents=read"}
	if got := fakes.MintLines(f.app.Mints()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mints:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The fake's tokens live an hour: kept until 55 minutes.
	f.Add(54*time.Minute + 59*time.Second)
	if got := f.token(t, "conv-1", "acme/app", "read"); got != first {
		t.Error("minted again before the token's margin")
	}
	n := len(f.app.Mints())
	f.Add(time.Second)
	if got := f.token(t, "conv-1", "acme/app", "read"); got == first {
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
	one := f.token(t, "conv-1", "acme/app", "read")
	two := f.token(t, "conv-2", "acme/app", "read")
	f.tokens.EndSandbox("conv-1")
	if got := f.token(t, "conv-1", "acme/app", "read"); got == one {
		t.Error("a revoked sandbox's token was used again")
	}
	if got := f.token(t, "conv-2", "acme/app", "read"); got != two {
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
		wg.Go(func() { got[i] = f.token(t, "conv-1", "acme/app", "write") })
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
		{"acme/missing", "cproxy: could not get a GitHub App token for acme/missing: GitHub answered 422 (\"There is at least one repository that does not exist or is not accessible to the parent installation.\"): the App's installation 5 may lack the repository or the permissions contents:read; the operator must install the App on acme/missing and grant it those permissions (docs/github-api.md)"},
		{"other/app", "cproxy: could not get a GitHub App token for other/app: the App's installation 5 gave a token for \"acme/app\", not for other/app: it is installed on another account; the operator must point upstream.github.installation_id at the installation on other, or leave it out to look the installation up per owner"},
	} {
		owner, name, _ := strings.Cut(tc.repo, "/")
		_, err := f.tokens.Token(context.Background(), "conv-1", contentsScope(owner, name, "read"))
		if status, _ := Status(err); err == nil || Message(err) != tc.want || status != http.StatusBadGateway {
			t.Errorf("%s: got %v (%d), want %s", tc.repo, err, status, tc.want)
		}
	}
	// A JWT signed with another key.
	_, otherPEM, err := fakes.NewAppKey()
	if err != nil {
		t.Fatal(err)
	}
	f.tokens.app.Key = keyLive(t, otherPEM)
	_, err = f.tokens.Token(context.Background(), "conv-1", contentsScope("acme", "app", "read"))
	if err == nil || !strings.Contains(Message(err), "GitHub refused the App's JWT with 401") {
		t.Errorf("another key: %v", err)
	}
	if msg := Message(err); strings.Contains(msg, "eyJ") || strings.Contains(msg, "PRIVATE KEY") {
		t.Errorf("the refusal holds the JWT or the key: %s", msg)
	}
}

// The fake git server takes an App token for the repository and access it
// was minted for alone: GitHub's own narrowing, which holds even if
// cproxy's checks did not.
func TestAppTokenNarrowedByGitHub(t *testing.T) {
	f := newAppFixture(t, "acme/app", "acme/lib")
	read := f.token(t, "conv-1", "acme/app", "read")
	write := f.token(t, "conv-1", "acme/app", "write")
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
	first := f.token(t, "conv-1", "acme/app", "read")
	req, _ := http.NewRequest(http.MethodGet, f.git.URL+"/acme/app.git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth("x-access-token", first.Reveal())
	err := f.tokens.CheckResponse("upstream.github.api_url is the API of the GitHub at upstream.github.url", basicToken)(&http.Response{StatusCode: http.StatusUnauthorized, Request: req})
	if status, _ := Status(err); status != http.StatusBadGateway {
		t.Errorf("a 401 from git: %v", err)
	}
	if got := f.token(t, "conv-1", "acme/app", "read"); got == first {
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
	f.token(t, "conv-1", "acme/app", "read")
	f.token(t, "conv-1", "Acme/lib", "write")
	if n := f.app.Lookups(); n != 1 {
		t.Errorf("look-ups: %d, want 1", n)
	}
	want := []string{"repositories=app contents=read", "repositories=lib contents=write"}
	if got := fakes.MintLines(f.app.Mints()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mints: %q", got)
	}
	_, err := f.tokens.Token(context.Background(), "conv-1", contentsScope("other", "app", "read"))
	wantErr := `cproxy: could not get a GitHub App token for other/app: the GitHub App is not installed on other with access to it (GitHub answered 404 ("Not Found")): the operator must install the App on other`
	if Message(err) != wantErr {
		t.Errorf("another owner: %v", err)
	}
}

// contentsScope is the scope the github route asks for a clone or a push.
func contentsScope(owner, name, access string) AppScope {
	return AppScope{Owner: owner, Name: name, Permissions: map[string]string{"contents": access}}
}

// canaryGitHub is the fake git server's own token, which an App token is
// not.
const canaryGitHub = "ghs_CANARYroutes0123456789abcdefghijklmn"

// basicToken is the password of a request's Basic auth, where the github
// route puts an App token.
func basicToken(r *http.Request) string {
	_, token, _ := r.BasicAuth()
	return token
}
