package fakes

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const gitToken = "ghs_CANARYfakegitserver0123456789abcdefgh"

func newGitServer(t *testing.T) *GitServer {
	t.Helper()
	NeedClient(t, "git")
	g, err := NewGitServer(t.TempDir(), GitServerOptions{Token: gitToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// gitClient runs the real git against the fake, with the token in an
// extra header, as cproxy sends it.
func gitClient(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	auth := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+gitToken))
	cmd := exec.Command("git", append([]string{"-c", "http.extraHeader=" + auth}, args...)...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+filepath.Join(home, ".gitconfig"),
		"GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestGitServerCloneAndPush(t *testing.T) {
	g := newGitServer(t)
	if err := g.CreateRepo("acme/app", "feature"); err != nil {
		t.Fatal(err)
	}
	main, feature := g.Ref("acme/app", "refs/heads/main"), g.Ref("acme/app", "refs/heads/feature")
	if len(main) != 40 || len(feature) != 40 || main == feature {
		t.Fatalf("refs: main %q feature %q", main, feature)
	}
	dir := t.TempDir()
	if out, err := gitClient(t, dir, "clone", g.URL+"/acme/app.git", "app"); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	app := filepath.Join(dir, "app")
	if out, err := gitClient(t, app, "commit", "--allow-empty", "-m", "more"); err != nil {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	if out, err := gitClient(t, app, "push", "origin", "HEAD:refs/heads/pushed"); err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	if g.Ref("acme/app", "refs/heads/pushed") == "" {
		t.Fatal("the push did not arrive")
	}
	reqs := g.Requests()
	if len(reqs) < 4 {
		t.Fatalf("recorded %d requests", len(reqs))
	}
	if r := reqs[0]; r.Method != "GET" || r.Path != "/acme/app.git/info/refs" || r.RawQuery != "service=git-upload-pack" {
		t.Errorf("first request: %s %s?%s", r.Method, r.Path, r.RawQuery)
	}
	last := reqs[len(reqs)-1]
	if last.Method != "POST" || last.Path != "/acme/app.git/git-receive-pack" || last.BodyBytes == 0 {
		t.Errorf("last request: %+v", last)
	}
}

func TestGitServerRefusesOtherCredentials(t *testing.T) {
	g := newGitServer(t)
	if err := g.CreateRepo("acme/app"); err != nil {
		t.Fatal(err)
	}
	for _, authz := range []string{"", "Bearer " + gitToken, "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:wrong")),
		"Basic " + base64.StdEncoding.EncodeToString([]byte("someone:"+gitToken))} {
		req, _ := http.NewRequest("GET", g.URL+"/acme/app.git/info/refs?service=git-upload-pack", nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%q: %s", authz, resp.Status)
		}
	}
	if n := len(g.Requests()); n != 4 {
		t.Errorf("recorded %d requests, want 4", n)
	}
}

// A push whose body is cut short (its client went away, or a proxy withheld
// its end) ends its backend: Close returns once the backend has exited, so
// none is left running after the test.
func TestGitServerCutPushEndsItsBackend(t *testing.T) {
	g := newGitServer(t)
	if err := g.CreateRepo("acme/app"); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + gitToken))
	fmt.Fprintf(conn, "POST /acme/app.git/git-receive-pack HTTP/1.1\r\nHost: github.test\r\nAuthorization: Basic %s\r\n"+
		"Content-Type: application/x-git-receive-pack-request\r\nContent-Length: 1000\r\n\r\n0000", auth)
	for len(g.Requests()) == 0 {
		time.Sleep(10 * time.Millisecond) // until the server has the request
	}
	conn.Close()
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close did not return: the backend of the cut push is still running")
	}
}
