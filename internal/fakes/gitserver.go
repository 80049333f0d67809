package fakes

import (
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// GitServerOptions configures a fake GitHub git server.
type GitServerOptions struct {
	// Token is the only credential accepted, as GitHub takes a token on its
	// git endpoints: Authorization: Basic of "x-access-token:TOKEN". Any
	// other request gets 401 with a Basic challenge. Required.
	Token string
}

// GitRequest is one request the git server received, recorded before the
// credential check, so refused requests are there too. Bodies are not kept
// (a pack may be large); their length is.
type GitRequest struct {
	Method           string
	Path             string // e.g. /acme/app.git/info/refs
	RawQuery         string // e.g. service=git-upload-pack
	Header           http.Header
	TransferEncoding []string // ["chunked"] for a streamed body
	ContentLength    int64    // -1 when unknown (chunked)
	BodyBytes        int64    // what the server read of the body
}

// GitServer is a stand-in for github.com's git smart HTTP on a loopback
// port: the real `git http-backend` behind net/http/cgi, serving bare
// repositories under Root as /OWNER/NAME.git/…, in any case (stored
// lower-case), pushes enabled. Its methods
// are safe for concurrent use.
type GitServer struct {
	// URL is the base URL, http://127.0.0.1:port, without a trailing slash.
	URL string
	// Root holds the bare repositories, Root/OWNER/NAME.git.
	Root string

	token   string
	git     string
	home    string
	srv     *http.Server
	backend *cgi.Handler
	// serving counts the requests being served, each with its backend
	// process until that exits; Close waits for them.
	serving sync.WaitGroup

	mu       sync.Mutex
	requests []GitRequest
	// scoped are the tokens that reach one repository each, as a GitHub
	// App installation token does (AddScopedToken).
	scoped map[string]tokenScope
	// moved maps a repository (owner/name, lower case) to the base URL
	// its requests are redirected to, as github.com redirects a renamed
	// repository.
	moved map[string]string
}

// NewGitServer starts a git server on 127.0.0.1 at a free port, with its
// repositories in a new directory under dir (a test's temp dir). It needs
// git on PATH. Close it when done.
func NewGitServer(dir string, o GitServerOptions) (*GitServer, error) {
	if o.Token == "" {
		return nil, fmt.Errorf("fakes: git server: a token is required")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("fakes: git server: %w", err)
	}
	root, err := os.MkdirTemp(dir, "gitserver-*")
	if err != nil {
		return nil, err
	}
	home := filepath.Join(root, ".home")
	repos := filepath.Join(root, "repos")
	for _, d := range []string{home, repos} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakes: git server: listen: %w", err)
	}
	g := &GitServer{URL: "http://" + ln.Addr().String(), Root: repos, token: o.Token, git: git, home: home}
	g.backend = &cgi.Handler{
		Path: git,
		Args: []string{"http-backend"},
		Dir:  repos,
		Env: append(g.gitEnv(),
			"GIT_PROJECT_ROOT="+repos,
			"GIT_HTTP_EXPORT_ALL=1",
			// http-backend serves receive-pack only to an authenticated
			// user or with http.receivepack set; the fake does its own
			// authentication.
			"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true",
		),
		Stderr: io.Discard,
	}
	g.srv = &http.Server{Handler: http.HandlerFunc(g.serve), ReadHeaderTimeout: 10 * time.Second}
	go g.srv.Serve(ln) // returns ErrServerClosed after Close
	return g, nil
}

// gitEnv isolates every git the fake runs from the machine's and the
// user's configuration.
func (g *GitServer) gitEnv() []string {
	return []string{
		"HOME=" + g.home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"PATH=" + os.Getenv("PATH"),
	}
}

// Close stops the server and waits until every backend it started has
// exited, so that none outlives the test.
func (g *GitServer) Close() {
	g.srv.Close()
	g.serving.Wait()
}

// tokenScope is what a scoped token reaches: one repository (owner/name,
// lower case), and pushes only with write.
type tokenScope struct {
	repo  string
	write bool
}

// AddScopedToken makes the server accept token, besides its own, for the
// repository ownerName alone, and for pushes only if write is set: as
// github.com takes a GitHub App installation token narrowed to one
// repository and to contents read or write. For another repository it
// answers 404, as GitHub does for a repository a token cannot see; for a
// push with a read token, 403.
func (g *GitServer) AddScopedToken(token, ownerName string, write bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.scoped == nil {
		g.scoped = map[string]tokenScope{}
	}
	g.scoped[token] = tokenScope{strings.ToLower(ownerName), write}
}

// scopedRefusal is how the server answers a request with a scoped token:
// 0 to serve it, 401 for a token it does not know, 404 or 403 for one that
// does not reach the repository or may not push.
func (g *GitServer) scopedRefusal(r *http.Request) int {
	user, pass, ok := r.BasicAuth()
	if !ok || user != "x-access-token" {
		return http.StatusUnauthorized
	}
	g.mu.Lock()
	sc, ok := g.scoped[pass]
	g.mu.Unlock()
	if !ok {
		return http.StatusUnauthorized
	}
	parts := strings.SplitN(r.URL.Path, "/", 4)
	if len(parts) != 4 || strings.ToLower(parts[1]+"/"+strings.TrimSuffix(parts[2], ".git")) != sc.repo {
		return http.StatusNotFound
	}
	push := parts[3] == "git-receive-pack" || r.URL.Query().Get("service") == "git-receive-pack"
	if push && !sc.write {
		return http.StatusForbidden
	}
	return 0
}

// Requests returns every request received so far, in order.
func (g *GitServer) Requests() []GitRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]GitRequest(nil), g.requests...)
}

// countingReader counts what the backend reads of a request body.
type countingReader struct {
	io.ReadCloser
	n  *int64
	mu *sync.Mutex
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.mu.Lock()
	*c.n += int64(n)
	c.mu.Unlock()
	return n, err
}

func (g *GitServer) serve(w http.ResponseWriter, r *http.Request) {
	g.serving.Add(1)
	defer g.serving.Done()
	g.mu.Lock()
	i := len(g.requests)
	g.requests = append(g.requests, GitRequest{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(),
		TransferEncoding: r.TransferEncoding, ContentLength: r.ContentLength,
	})
	g.mu.Unlock()
	var read int64
	r.Body = countingReader{ReadCloser: r.Body, n: &read, mu: &g.mu}
	defer func() {
		g.mu.Lock()
		g.requests[i].BodyBytes = read
		g.mu.Unlock()
	}()

	if parts := strings.SplitN(r.URL.Path, "/", 4); len(parts) == 4 {
		g.mu.Lock()
		to, ok := g.moved[strings.ToLower(parts[1]+"/"+strings.TrimSuffix(parts[2], ".git"))]
		g.mu.Unlock()
		if ok {
			loc := to + ".git/" + parts[3]
			if r.URL.RawQuery != "" {
				loc += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, loc, http.StatusMovedPermanently)
			return
		}
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+g.token))
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
		switch g.scopedRefusal(r) {
		case 0:
		case http.StatusNotFound:
			http.Error(w, "Repository not found.", http.StatusNotFound)
			return
		case http.StatusForbidden:
			http.Error(w, "Permission to "+strings.TrimPrefix(r.URL.Path, "/")+" denied to cproxy-test[bot].", http.StatusForbidden)
			return
		default:
			// github.com's answer to a git request without valid credentials.
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "Invalid username or token. Password authentication is not supported for Git operations.\n")
			return
		}
	}
	// github.com takes chunked request bodies (git streams a push over
	// http.postBuffer that way); net/http/cgi refuses them. Without a
	// length http-backend reads its input to the end, as behind Apache.
	// A declared length goes the same way: given CONTENT_LENGTH, git
	// 2.39's http-backend spins for ever on a body cut short (it reads 0
	// at the end and asks again), outliving the test that cut it; read to
	// the end, a cut body is just a short one.
	if len(r.TransferEncoding) > 0 || r.ContentLength > 0 {
		r.TransferEncoding = nil
		r.ContentLength = -1
	}
	// github.com matches owner and repository names in any case.
	if parts := strings.SplitN(r.URL.Path, "/", 4); len(parts) == 4 {
		parts[1], parts[2] = strings.ToLower(parts[1]), strings.ToLower(parts[2])
		r.URL.Path = strings.Join(parts, "/")
	}
	g.backend.ServeHTTP(w, r)
}

// CreateRepo makes a bare repository OWNER/NAME.git whose main branch has
// one commit holding README.md, and one more branch per name in branches,
// each with a commit of its own on top of main.
func (g *GitServer) CreateRepo(ownerName string, branches ...string) error {
	bare := g.repoDir(ownerName)
	work, err := os.MkdirTemp(g.home, "work-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := g.run("", "init", "--quiet", "--bare", "--initial-branch=main", bare); err != nil {
		return err
	}
	if err := g.run("", "init", "--quiet", "--initial-branch=main", work); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte("# "+ownerName+"\n"), 0o644); err != nil {
		return err
	}
	if err := g.run(work, "add", "README.md"); err != nil {
		return err
	}
	if err := g.run(work, "commit", "--quiet", "-m", "initial commit"); err != nil {
		return err
	}
	refspecs := []string{"main:refs/heads/main"}
	for _, b := range branches {
		for _, args := range [][]string{
			{"checkout", "--quiet", "-b", b, "main"},
			{"commit", "--quiet", "--allow-empty", "-m", "work on " + b},
			{"checkout", "--quiet", "main"},
		} {
			if err := g.run(work, args...); err != nil {
				return err
			}
		}
		refspecs = append(refspecs, b+":refs/heads/"+b)
	}
	return g.run(work, append([]string{"push", "--quiet", bare}, refspecs...)...)
}

// Rename answers requests for the repository from (OWNER/NAME) with a 301 to
// the same request of to, as github.com does for a renamed repository.
func (g *GitServer) Rename(from, to string) {
	g.MoveTo(from, g.URL+"/"+to)
}

// MoveTo answers requests for the repository ownerName with a 301 to the
// same request under base (a URL ending in the new OWNER/NAME, without
// .git), on any host.
func (g *GitServer) MoveTo(ownerName, base string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moved == nil {
		g.moved = map[string]string{}
	}
	g.moved[strings.ToLower(ownerName)] = base
}

// Commit adds an empty commit with message msg on top of branch, as if
// someone else had pushed it, and returns its object id.
func (g *GitServer) Commit(ownerName, branch, msg string) (string, error) {
	dir := g.repoDir(ownerName)
	ref := "refs/heads/" + branch
	parent := g.Ref(ownerName, ref)
	if parent == "" {
		return "", fmt.Errorf("fakes: %s has no branch %s", ownerName, branch)
	}
	out, err := g.output("--git-dir", dir, "commit-tree", parent+"^{tree}", "-p", parent, "-m", msg)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if _, err := g.output("--git-dir", dir, "update-ref", ref, id, parent); err != nil {
		return "", err
	}
	return id, nil
}

// Ref returns the object id ref (e.g. refs/heads/main) names in the
// repository, or "" if there is no such ref.
func (g *GitServer) Ref(ownerName, ref string) string {
	cmd := exec.Command(g.git, "--git-dir", g.repoDir(ownerName), "rev-parse", "--verify", "--quiet", ref)
	cmd.Env = g.gitEnv()
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// SetRef points ref at the object id in the repository, as a push of
// someone else's would move it.
func (g *GitServer) SetRef(ownerName, ref, id string) error {
	cmd := exec.Command(g.git, "--git-dir", g.repoDir(ownerName), "update-ref", ref, id)
	cmd.Env = g.gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git update-ref %s %s: %v: %s", ref, id, err, out)
	}
	return nil
}

func (g *GitServer) repoDir(ownerName string) string {
	return filepath.Join(g.Root, filepath.FromSlash(strings.ToLower(ownerName))+".git")
}

func (g *GitServer) run(dir string, args ...string) error {
	cmd := g.command(dir, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fakes: git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (g *GitServer) output(args ...string) (string, error) {
	out, err := g.command("", args...).Output()
	if err != nil {
		return "", fmt.Errorf("fakes: git %s: %v", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (g *GitServer) command(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(g.git, args...)
	cmd.Dir = dir
	cmd.Env = append(g.gitEnv(),
		"GIT_AUTHOR_NAME=Fake GitHub", "GIT_AUTHOR_EMAIL=fake@example.com",
		"GIT_COMMITTER_NAME=Fake GitHub", "GIT_COMMITTER_EMAIL=fake@example.com",
		"GIT_AUTHOR_DATE=2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2025-01-01T00:00:00Z",
	)
	return cmd
}
