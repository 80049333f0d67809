package routes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/policy"
)

const bindingPolicy = `[profile.default]
models = ["*"]

[profile.lan]
models = ["*"]
sources = ["10.20.0.0/16"]

[profile.sock]
models = ["*"]
bind = "socket"

[[sandbox]]
match = "vm-*"
profile = "sock"
`

func withPolicy(src string) envOpt {
	return func(o *testOptions) { o.Policy = mustPolicyOpt(src) }
}

// mustPolicyOpt loads a policy outside a test's helpers (envOpts have no t).
func mustPolicyOpt(src string) *policy.Policy {
	dir, err := os.MkdirTemp("", "cproxy-policy")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policy.toml")
	if err := writeFile(path, src); err != nil {
		panic(err)
	}
	p, err := policy.LoadPolicy(path)
	if err != nil {
		panic(err)
	}
	return p
}

func withSockets(t *testing.T, dir string) envOpt {
	return func(o *testOptions) {
		ss, err := OpenSandboxSockets(dir, func() *http.Server { return &http.Server{} }, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close() })
		o.SandboxSockets = ss
	}
}

// mint calls POST /tokens and returns the status and the decoded answer
// (or the error message).
func (e *env) mint(query string) (int, tokenCreated, string) {
	e.t.Helper()
	resp, err := http.Post(e.admin.URL+"/tokens?"+query, "", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out tokenCreated
	var fail struct{ Error string }
	json.Unmarshal(b, &out)
	json.Unmarshal(b, &fail)
	return resp.StatusCode, out, fail.Error
}

// authAs runs authenticate on a request that came from peer over a
// listener of the given local address.
func (e *env) authAs(tok string, local net.Addr, peer string, ctx context.Context) (*Session, error) {
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	r.RemoteAddr = peer
	if ctx == nil {
		ctx = context.Background()
	}
	r = r.WithContext(context.WithValue(ctx, http.LocalAddrContextKey, local))
	return e.srv.authenticate(r)
}

var (
	tcpLocal  = &net.TCPAddr{IP: net.IPv4(10, 20, 0, 1), Port: 8080}
	unixLocal = &net.UnixAddr{Name: "/run/cproxy/proxy.sock", Net: "unix"}
)

func TestSourceBinding(t *testing.T) {
	e := newEnv(t, withPolicy(bindingPolicy))
	lan := e.token("conv-1", "profile=lan")
	narrow := e.token("conv-2", "profile=lan", "source=10.20.30.5")
	anywhere := e.token("conv-3", "source=192.168.7.0/24")
	free := e.token("conv-4")

	for _, tt := range []struct {
		name, tok string
		local     net.Addr
		peer      string
		ok        bool
	}{
		{"profile source", lan, tcpLocal, "10.20.3.4:5000", true},
		{"profile source, IPv4-mapped", lan, tcpLocal, "[::ffff:10.20.3.4]:5000", true},
		{"outside the profile's sources", lan, tcpLocal, "10.21.0.1:5000", false},
		{"loopback", lan, tcpLocal, "127.0.0.1:5000", false},
		{"shared Unix socket", lan, unixLocal, "", false},
		// A Unix client can bind its end to a path that reads like an address.
		{"Unix socket, address-like peer path", lan, unixLocal, "10.20.3.4:5000", false},
		{"token source", narrow, tcpLocal, "10.20.30.5:1", true},
		{"token source, other address in the profile", narrow, tcpLocal, "10.20.30.6:1", false},
		{"token prefix", anywhere, tcpLocal, "192.168.7.200:1", true},
		{"token prefix, outside", anywhere, tcpLocal, "192.168.8.1:1", false},
		{"no binding", free, tcpLocal, "172.16.0.9:1", true},
		{"no binding, Unix socket", free, unixLocal, "@", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sess, err := e.authAs(tt.tok, tt.local, tt.peer, nil)
			if tt.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrForbidden) {
				t.Fatalf("err = %v, want a 403 refusal", err)
			}
			msg := Message(err)
			if !strings.Contains(msg, "is bound to another address: it is not accepted from ") {
				t.Errorf("message %q", msg)
			}
			for _, secret := range []string{"10.20.0", "10.20.30.5", "192.168.7"} {
				if strings.Contains(msg, secret) && !strings.Contains(tt.peer, secret) {
					t.Errorf("message %q reveals the allowed source", msg)
				}
			}
			if sess == nil || sess.Sandbox == "" {
				t.Errorf("no session for the audit line")
			}
		})
	}

	// Through the proxy listener: the client is 127.0.0.1, so the lan
	// token is refused in the model route's format, and nothing is
	// forwarded.
	r := e.do("POST", "/v1/messages", bearer(lan), hello)
	if typ, msg := errorType(t, r); r.status != http.StatusForbidden || typ != "permission_error" ||
		!strings.HasSuffix(msg, "is bound to another address: it is not accepted from 127.0.0.1") {
		t.Errorf("got %d %s %q", r.status, typ, msg)
	}
	if r := e.do("POST", "/v1/messages", bearer(free), hello); r.status != http.StatusOK {
		t.Errorf("unbound token: %d %s", r.status, r.body)
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Errorf("upstream saw %d requests, want 1", n)
	}
	if !strings.Contains(e.logs.String(), `"reason":"cproxy: sandbox token tok_`) {
		t.Errorf("the audit line has no reason:\n%s", e.logs.String())
	}
}

// socketClient sends requests over a Unix socket.
func socketClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
}

func socketDo(t *testing.T, path, tok string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://cproxy/v1/messages", strings.NewReader(hello))
	for k, v := range bearer(tok) {
		req.Header.Set(k, v)
	}
	c := socketClient(path)
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func TestSandboxSocket(t *testing.T) {
	dir := testutil.SocketDir(t)
	e := newEnv(t, withPolicy(bindingPolicy), withSockets(t, dir))

	code, out, msg := e.mint("sandbox=conv-1&bind=socket")
	path := filepath.Join(dir, "conv-1.sock")
	if code != http.StatusCreated || out.Bind != "socket" || out.Socket != path {
		t.Fatalf("mint: %d %+v %s", code, out, msg)
	}
	st, err := os.Lstat(path)
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != SocketMode {
		t.Fatalf("socket %s: %v %v", path, st.Mode(), err)
	}
	bound := out.Value
	plain := e.token("conv-1")
	other := e.token("conv-2")
	_, vm, _ := e.mint("sandbox=vm-7") // bound by its profile
	if vm.Bind != "socket" || vm.Socket != filepath.Join(dir, "vm-7.sock") {
		t.Errorf("profile bind: %+v", vm)
	}

	if r := socketDo(t, path, bound); r.status != http.StatusOK {
		t.Errorf("bound token on its socket: %d %s", r.status, r.body)
	}
	if r := socketDo(t, path, plain); r.status != http.StatusOK {
		t.Errorf("unbound token of the same sandbox on its socket: %d %s", r.status, r.body)
	}
	r := socketDo(t, path, other)
	if typ, msg := errorType(t, r); r.status != http.StatusForbidden || typ != "permission_error" ||
		!strings.Contains(msg, "belongs to another sandbox than this socket's") {
		t.Errorf("other sandbox's token on the socket: %d %q", r.status, msg)
	}
	if r := socketDo(t, vm.Socket, bound); r.status != http.StatusForbidden {
		t.Errorf("bound token on another sandbox's socket: %d", r.status)
	}
	for _, tok := range []string{bound, vm.Value} {
		r = e.do("POST", "/v1/messages", bearer(tok), hello)
		if _, msg := errorType(t, r); r.status != http.StatusForbidden ||
			!strings.HasSuffix(msg, "is bound to its sandbox's own socket: it is not accepted on this listener") {
			t.Errorf("bound token over TCP: %d %q", r.status, msg)
		}
	}
	if n := len(e.fake.Requests()); n != 2 {
		t.Errorf("upstream saw %d requests, want 2", n)
	}

	// Minting again keeps the socket; revoking removes it.
	if _, again, _ := e.mint("sandbox=conv-1&bind=socket"); again.Socket != path {
		t.Errorf("second mint: %+v", again)
	}
	req, _ := http.NewRequest("DELETE", e.admin.URL+"/tokens?sandbox=conv-1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket still there after revocation: %v", err)
	}
	if _, err := net.Dial("unix", path); err == nil {
		t.Error("the revoked socket still accepts")
	}
	if _, err := os.Lstat(vm.Socket); err != nil {
		t.Errorf("another sandbox's socket went with it: %v", err)
	}
}

func TestRestoreSockets(t *testing.T) {
	dir := testutil.SocketDir(t)
	e := newEnv(t, withPolicy(bindingPolicy), withSockets(t, dir))
	e.mint("sandbox=conv-1&bind=socket")
	e.mint("sandbox=conv-2&bind=socket")
	e.mint("sandbox=conv-3")
	req, _ := http.NewRequest("DELETE", e.admin.URL+"/tokens?sandbox=conv-2", nil)
	http.DefaultClient.Do(req)
	// A restart on the same store and directory.
	e.srv.sockets.stop()

	ss, err := OpenSandboxSockets(dir, func() *http.Server { return &http.Server{} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	u, _ := url.Parse(e.fake.URL)
	o := testOptions{Options: Options{Store: e.srv.store, Policy: e.srv.Policy(), SandboxSockets: ss}, Anthropic: Upstream{URL: u}}
	srv := New(o.build())
	if err := srv.RestoreSockets(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, de := range entries {
		names = append(names, de.Name())
	}
	if strings.Join(names, " ") != "conv-1.sock" {
		t.Errorf("sockets after restart: %v", names)
	}
}

func TestSocketDirChecks(t *testing.T) {
	newSrv := func() *http.Server { return &http.Server{} }
	dir := testutil.SocketDir(t)
	if _, err := OpenSandboxSockets(filepath.Join(dir, "missing"), newSrv, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing dir: %v", err)
	}
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := OpenSandboxSockets(open, newSrv, nil); err == nil || !strings.Contains(err.Error(), "is writable by everyone") {
		t.Errorf("world-writable dir: %v", err)
	}
	group := filepath.Join(dir, "group")
	os.Mkdir(group, 0o770)
	os.Chmod(group, 0o770)
	if _, err := OpenSandboxSockets(group, newSrv, nil); err == nil || !strings.Contains(err.Error(), "is writable by its group") {
		t.Errorf("group-writable dir: %v", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := OpenSandboxSockets(file, newSrv, nil); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file: %v", err)
	}

	// A stale socket is replaced; a live one, or a file, is not.
	ok := filepath.Join(dir, "ok")
	os.Mkdir(ok, 0o750)
	stale, _ := net.Listen("unix", filepath.Join(ok, "conv-1.sock"))
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	live, _ := net.Listen("unix", filepath.Join(ok, "conv-2.sock"))
	defer live.Close()
	os.WriteFile(filepath.Join(ok, "conv-3.sock"), []byte("data"), 0o600)
	if _, err := OpenSandboxSockets(ok, newSrv, nil); err == nil || !strings.Contains(err.Error(), "is in use") {
		t.Fatalf("a live socket in the dir: %v", err)
	}
	live.Close()
	ss, err := OpenSandboxSockets(ok, newSrv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	if _, err := ss.Open("conv-1"); err != nil {
		t.Errorf("stale socket: %v", err)
	}
	if _, err := ss.Open("conv-3"); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("a file in the socket's place: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ok, "conv-3.sock")); string(b) != "data" {
		t.Error("the file was touched")
	}
	ss.Close()
	if _, err := os.Lstat(filepath.Join(ok, "conv-1.sock")); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// A socket path the kernel could not bind is refused before anything is
// made, saying how long it is: the path itself, or its folder with the
// temporary name the socket is created under there first.
func TestListenUnixPathLength(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxSocketPath)
	if _, err := ListenUnix(long, SocketMode); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("is %d bytes, too long for a Unix socket path: at most %d bytes", len(long), MaxSocketPath)) {
		t.Errorf("ListenUnix(a path of %d bytes) = %v", len(long), err)
	}
	dir := "/" + strings.Repeat("d", MaxSocketPath-tempSocketName-1)
	if _, err := ListenUnix(dir+"/a", SocketMode); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the folder of %s/a is %d bytes, too long", dir, len(dir))) {
		t.Errorf("ListenUnix in a folder of %d bytes = %v", len(dir), err)
	}
	if err := checkSocketLength(dir[:len(dir)-1] + "/a"); err != nil {
		t.Errorf("a folder of %d bytes: %v", len(dir)-1, err)
	}
}
