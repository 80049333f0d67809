package routes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/budget"
	"github.com/cproxy/cproxy/tokens"
)

// SocketMode is the mode of every Unix socket cproxy creates: its user and
// group may connect, nobody else. A harness gives a sandbox's processes
// access through the group (or by running cproxy as the sandbox's user).
const SocketMode fs.FileMode = 0o660

// socketSuffix names DIR/SANDBOX.sock.
const socketSuffix = ".sock"

// sandboxSocketKey tags the requests of a sandbox's own socket with its id.
type sandboxSocketKey struct{}

// socketSandbox is the sandbox whose own socket the request came in on; ""
// for any other listener.
func socketSandbox(r *http.Request) string {
	id, _ := r.Context().Value(sandboxSocketKey{}).(string)
	return id
}

// SandboxSockets serves one Unix socket per sandbox in a directory,
// DIR/SANDBOX.sock, each with the proxy handler. A request that comes in on
// one is known to come from that sandbox: the harness mounts each socket
// into its own sandbox only. The admin API opens a sandbox's socket when it
// mints a token bound to it and removes it when the sandbox's tokens are
// revoked.
type SandboxSockets struct {
	dir       string
	newServer func() *http.Server
	log       *slog.Logger

	mu       sync.Mutex
	handler  http.Handler      // set by New
	conns    *budget.ConnLimit // set by New; nil: no bound
	open     map[string]*sandboxSocket
	draining map[*http.Server]bool // revoked sockets whose open requests may finish
	shut     bool
}

type sandboxSocket struct {
	path string
	srv  *http.Server
}

// OpenSandboxSockets checks dir and removes the sockets a previous run left
// behind. dir must be an existing directory that others cannot write to: a
// sandbox able to create files there could put its own socket in another's
// place. newServer returns an http.Server with the limits of the other
// listeners; Handler and BaseContext are set here.
func OpenSandboxSockets(dir string, newServer func() *http.Server, log *slog.Logger) (*SandboxSockets, error) {
	// Absolute, because the harness mounts the paths the admin API gives.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := CheckSocketDir(dir, "a sandbox could put its own socket in another's place", "a sandbox given that group to connect with could put its own socket in another's place"); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), socketSuffix)
		if ok && tokens.ValidSandboxID(id) && e.Type()&fs.ModeSocket != 0 {
			if err := removeStaleSocket(filepath.Join(dir, e.Name())); err != nil {
				return nil, err
			}
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SandboxSockets{dir: dir, newServer: newServer, log: log, open: map[string]*sandboxSocket{}, draining: map[*http.Server]bool{}}, nil
}

// CheckSocketDir checks that dir, where cproxy is to create Unix sockets,
// is an existing directory that neither its group nor others may write to:
// whoever may write there can put a socket of their own in place of
// cproxy's. byOthers and byGroup say, in the refusal, what that would let
// them do. A shared folder such as /tmp (writable by everyone, with the
// sticky bit) is refused too, with the advice to make one of cproxy's own:
// anyone may create the path there before cproxy does, or once it stopped.
func CheckSocketDir(dir, byOthers, byGroup string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist: create it, owned by cproxy's user, mode 0750 or 0700", dir)
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case st.Mode().Perm()&0o002 != 0 && st.Mode()&fs.ModeSticky != 0:
		return fmt.Errorf("%s is a folder everyone may write to: %s (use a folder of cproxy's own, owned by its user, mode 0750 or 0700, e.g. /run/cproxy)", dir, byOthers)
	case st.Mode().Perm()&0o002 != 0:
		return fmt.Errorf("%s is writable by everyone: %s (chmod go-w %s)", dir, byOthers, dir)
	case st.Mode().Perm()&0o020 != 0:
		// Sandboxes are given a group to connect with (SocketMode); if that
		// group may write here, they may replace each other's sockets.
		return fmt.Errorf("%s is writable by its group: %s (chmod g-w %s)", dir, byGroup, dir)
	}
	return nil
}

// Dir is the directory the sockets are in, absolute; "" for nil.
func (ss *SandboxSockets) Dir() string {
	if ss == nil {
		return ""
	}
	return ss.dir
}

// Path is where the socket of sandbox is (or would be).
func (ss *SandboxSockets) Path(sandbox string) string {
	return filepath.Join(ss.dir, sandbox+socketSuffix)
}

// Open serves the socket of sandbox, creating it if it is not there yet.
func (ss *SandboxSockets) Open(sandbox string) (string, error) {
	if !tokens.ValidSandboxID(sandbox) {
		return "", errors.New("invalid sandbox id")
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.shut {
		return "", errors.New("shutting down")
	}
	if s := ss.open[sandbox]; s != nil {
		return s.path, nil
	}
	path := ss.Path(sandbox)
	if err := removeStaleSocket(path); err != nil {
		return "", err
	}
	ln, err := listenUnix(path)
	if err != nil {
		return "", err
	}
	srv := ss.newServer()
	srv.Handler = ss.handler
	srv.BaseContext = func(net.Listener) context.Context {
		return context.WithValue(context.Background(), sandboxSocketKey{}, sandbox)
	}
	ss.open[sandbox] = &sandboxSocket{path: path, srv: srv}
	go func() {
		if err := srv.Serve(ss.conns.Listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ss.log.Error("sandbox socket failed", "sandbox", sandbox, "socket", path, "err", err)
		}
	}()
	ss.log.Info("sandbox socket opened", "sandbox", sandbox, "socket", path)
	return path, nil
}

// Remove removes the socket of sandbox; requests already in progress on it
// may finish. Removing a socket that is not open does nothing.
func (ss *SandboxSockets) Remove(sandbox string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.open[sandbox]
	if s == nil {
		return
	}
	delete(ss.open, sandbox)
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		ss.log.Warn("removing a sandbox socket failed", "sandbox", sandbox, "socket", s.path, "err", err)
	}
	ss.draining[s.srv] = true
	go func() {
		s.srv.Shutdown(context.Background())
		ss.mu.Lock()
		delete(ss.draining, s.srv)
		ss.mu.Unlock()
	}()
	ss.log.Info("sandbox socket removed", "sandbox", sandbox, "socket", s.path)
}

// Shutdown removes every socket and waits, until ctx is done, for the
// requests in progress on them to finish, like http.Server.Shutdown.
func (ss *SandboxSockets) Shutdown(ctx context.Context) error {
	servers := ss.stop()
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, srv := range servers {
		wg.Go(func() { errs[i] = srv.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close removes every socket and closes its connections at once.
func (ss *SandboxSockets) Close() error {
	var errs []error
	for _, srv := range ss.stop() {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}

func (ss *SandboxSockets) stop() []*http.Server {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.shut = true
	var servers []*http.Server
	for id, s := range ss.open {
		os.Remove(s.path)
		servers = append(servers, s.srv)
		delete(ss.open, id)
	}
	for srv := range ss.draining {
		servers = append(servers, srv)
	}
	return servers
}

// ListenUnix listens on a Unix socket at path with mode, removing a
// socket a previous run left there (and refusing to touch anything else,
// or a socket something listens on). The socket is created under a
// temporary name, given its mode, then moved into place, so it never
// exists at path with a looser mode. Its file is not removed when the
// listener closes: the caller removes it.
func ListenUnix(path string, mode fs.FileMode) (net.Listener, error) {
	if err := checkSocketLength(path); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	return listenUnixMode(path, mode)
}

// MaxSocketPath is the longest Unix socket path every platform binds
// (sun_path is 104 bytes on macOS and the BSDs, 108 on Linux, with a NUL),
// as the config's checks count it too.
const MaxSocketPath = 103

// tempSocketName is the length of the temporary name a socket is created
// under, in its directory, before it is moved into place.
const tempSocketName = len(".cproxy-") + 12 + len(socketSuffix)

// checkSocketLength refuses a socket path the kernel could not bind,
// itself or the temporary name in its directory, saying how long it is.
func checkSocketLength(path string) error {
	if len(path) > MaxSocketPath {
		return fmt.Errorf("%s is %d bytes, too long for a Unix socket path: at most %d bytes (as much as sun_path holds on every platform); use a shorter path", path, len(path), MaxSocketPath)
	}
	if dir := filepath.Dir(path); len(dir)+1+tempSocketName > MaxSocketPath {
		return fmt.Errorf("the folder of %s is %d bytes, too long: cproxy creates the socket under a temporary name of %d bytes there first, and a Unix socket path has at most %d bytes (as much as sun_path holds on every platform); use a folder of at most %d bytes", path, len(dir), tempSocketName, MaxSocketPath, MaxSocketPath-1-tempSocketName)
	}
	return nil
}

func listenUnix(path string) (net.Listener, error) { return listenUnixMode(path, SocketMode) }

func listenUnixMode(path string, mode fs.FileMode) (net.Listener, error) {
	var b [6]byte
	rand.Read(b[:])
	tmp := filepath.Join(filepath.Dir(path), ".cproxy-"+hex.EncodeToString(b[:])+socketSuffix)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	return ln, nil
}

// removeStaleSocket removes the socket at path if nothing listens on it. A
// path that is not a socket, or one something listens on, is an error.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("%s exists and is not a socket: cproxy will not replace it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use: another process listens on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// RestoreSockets opens the socket of every sandbox that holds a live token
// bound to one, as they were before a restart. serve calls it before the
// proxy listens.
func (s *Server) RestoreSockets(ctx context.Context) error {
	if s.sockets == nil {
		return nil
	}
	return tokens.Walk(ctx, s.store, tokens.ListQuery{State: tokens.StateLive, Now: s.now()}, func(rec tokens.Record) error {
		if rec.Bind != policy.BindSocket {
			return nil
		}
		if _, err := s.sockets.Open(rec.Sandbox); err != nil {
			return fmt.Errorf("socket of sandbox %s: %w", rec.Sandbox, err)
		}
		return nil
	})
}
