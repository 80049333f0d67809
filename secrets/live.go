package secrets

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cproxy/cproxy/internal/watch"
)

// ExpiryWarning is how long before a claude-code token expires that cproxy
// starts warning: once per token, in the log.
const ExpiryWarning = time.Hour

// How often Watch looks for a new claude-code login. A stat every two
// seconds costs nothing and picks up Claude Code's refresh (about every 8
// hours) before the old token runs out. The Keychain has no cheap stat:
// reading it runs a process, so it is read once a minute.
const (
	claudeCodeFilePoll     = 2 * time.Second
	claudeCodeKeychainPoll = time.Minute
)

// Live is one upstream's credential while cproxy runs. Routes call Current
// on every request: an atomic load, and for a claude-code token a clock
// check. Reload (on SIGHUP) and Watch (claude-code) replace it from its
// source; a source that fails keeps the credential in force.
type Live struct {
	name   string // the upstream, as log lines name it
	source Source
	lines  bool // the credential may span lines (LiveKey)
	loader *Loader
	log    *slog.Logger
	now    func() time.Time

	cur atomic.Pointer[held]

	mu      sync.Mutex  // one reload at a time
	file    *watch.File // claude-code: Claude Code's credentials file (mu); nil: none
	pollErr string      // claude-code: the last poll's error, logged once (mu)
}

// held is one value of a Live. The flags are per value, so each token is
// warned about once, however many requests see it.
type held struct {
	secret  Secret
	expires time.Time // claude-code only; zero: does not expire, or unknown
	where   string    // claude-code: the file or Keychain item it came from

	warned        atomic.Bool
	expiredLogged atomic.Bool
}

// Live loads s and returns it as a Live credential for the upstream name;
// log receives its reloads, failures and expiry warnings. Errors are as
// Load's, except that an expired claude-code token is no error: it is
// held, logged, and refused to requests until Claude Code refreshes it.
func (l *Loader) Live(name string, s Source, log *slog.Logger) (*Live, error) {
	return l.live(name, s, log, time.Now, false)
}

// LiveKey is Live for a private key (a GitHub App's, PEM): a file: source
// may hold more than one line.
func (l *Loader) LiveKey(name string, s Source, log *slog.Logger) (*Live, error) {
	return l.live(name, s, log, time.Now, true)
}

func (l *Loader) live(name string, s Source, log *slog.Logger, now func() time.Time, lines bool) (*Live, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lv := &Live{name: name, source: s, loader: l, log: log, now: now, lines: lines}
	if s == "claude-code" {
		// Watch rereads the login when the file changes; without one
		// (no home folder), read says why.
		if path, err := ClaudeCodeFile(); err == nil {
			lv.file = watch.New(path, false)
		}
	}
	h, err := lv.read()
	if h == nil {
		return nil, err
	}
	lv.cur.Store(h)
	lv.check(h, now())
	return lv, nil
}

// Source is where the credential comes from.
func (l *Live) Source() Source { return l.source }

// Current returns the credential to send now. An expired claude-code token
// is not returned: the error (ErrExpired) says why and what the operator
// must do, with no value and no path, so a route can pass it to the client.
func (l *Live) Current() (Secret, error) {
	h := l.cur.Load()
	if h.expires.IsZero() {
		return h.secret, nil
	}
	if err := l.check(h, l.now()); err != nil {
		return Secret{}, err
	}
	return h.secret, nil
}

// check logs a token close to its expiry (WARN) or past it (ERROR), once
// per token, and reports the expired one.
func (l *Live) check(h *held, now time.Time) error {
	if h.expires.IsZero() {
		return nil
	}
	left := h.expires.Sub(now)
	at := h.expires.UTC().Format(time.RFC3339)
	switch {
	case left <= 0:
		if h.expiredLogged.CompareAndSwap(false, true) {
			l.log.Error("claude-code token expired: model requests are refused until Claude Code refreshes its login",
				"upstream", l.name, "source", string(l.source), "login", h.where, "expired", at, "hint", expiredHint)
		}
		return &expiredError{at: at}
	case left < ExpiryWarning:
		if h.warned.CompareAndSwap(false, true) {
			l.log.Warn("claude-code token expires soon: run claude on this machine to refresh its login",
				"upstream", l.name, "source", string(l.source), "login", h.where, "expires", at, "left", left.Round(time.Minute).String())
		}
	}
	return nil
}

// expiredError is what a request is told about an expired token.
type expiredError struct{ at string }

func (e *expiredError) Error() string {
	return "claude-code: Claude Code's login on the cproxy host " + ErrExpired.Error() + " (at " + e.at + "): the operator must run claude there to refresh it, or switch to a token from claude setup-token"
}

func (e *expiredError) Unwrap() error { return ErrExpired }

// read loads the source once. For claude-code an expired token comes back
// with its error; a nil held means nothing usable was read.
func (l *Live) read() (*held, error) {
	if l.source != "claude-code" {
		s, err := l.loader.load(l.source, l.lines)
		if err != nil {
			return nil, err
		}
		return &held{secret: s}, nil
	}
	if l.file != nil {
		l.file.Reading()
	}
	login, err := readClaudeCode(l.now())
	if login.token.IsZero() {
		return nil, err
	}
	return &held{secret: login.token, expires: login.expires, where: login.where}, err
}

// Reload rereads the credential from its source, as SIGHUP asks. env:
// sources are skipped: a process's environment does not change. A source
// that cannot be read keeps the credential in force and is logged as an
// ERROR with the reason and the fix; the value is never logged.
func (l *Live) Reload() {
	if l.source.Kind() == "env" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	changed, err := l.reload()
	if err != nil && !errors.Is(err, ErrExpired) {
		l.log.Error("credential reload failed; the previous credential stays in force",
			"upstream", l.name, "source", string(l.source), "err", err.Error(),
			"hint", "fix the source, then send SIGHUP again")
		return
	}
	l.log.Info("credential reloaded", "upstream", l.name, "source", string(l.source), "changed", changed)
}

// reload reads the source and swaps a new value in. The same value keeps
// its held, so it is not warned about twice.
func (l *Live) reload() (changed bool, err error) {
	h, err := l.read()
	if h == nil {
		return false, err
	}
	if old := l.cur.Load(); old.secret == h.secret && old.expires.Equal(h.expires) {
		return false, err
	}
	l.cur.Store(h)
	l.check(h, l.now())
	return true, err
}

// Watch keeps a claude-code credential current until ctx is done: it
// rereads Claude Code's login when Claude Code rewrites it (the file's
// modification time or size changed; on macOS, the Keychain item, every
// minute). A poll rather than a check on the request path keeps requests
// to one atomic load, and picks a refreshed token up even while no request
// comes. For other sources Watch returns at once: they change on SIGHUP.
func (l *Live) Watch(ctx context.Context) {
	if l.source != "claude-code" {
		return
	}
	every := claudeCodeFilePoll
	if runtime.GOOS == "darwin" {
		every = claudeCodeKeychainPoll
	}
	watch.Every(ctx, every, l.poll)
}

// poll rereads a claude-code login that may have changed.
func (l *Live) poll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if runtime.GOOS != "darwin" && (l.file == nil || !l.file.Changed()) {
		return
	}
	changed, err := l.reload()
	failed := err != nil && !errors.Is(err, ErrExpired)
	if !failed {
		l.pollErr = ""
	}
	switch {
	case failed && err.Error() != l.pollErr:
		// Claude Code may be halfway through writing the file: the next
		// write changes the stamp and this runs again.
		l.pollErr = err.Error()
		l.log.Error("claude-code login could not be reread; the previous token stays in force",
			"upstream", l.name, "source", string(l.source), "err", err.Error())
	case changed:
		l.log.Info("claude-code login changed: using its new token", "upstream", l.name, "source", string(l.source),
			"login", l.cur.Load().where, "expires", l.cur.Load().expires.UTC().Format(time.RFC3339))
	}
}

// Readable reports whether the credential's source can still be read, as a
// restart or SIGHUP would read it, without touching the credential in
// force: nil, or why not. It is what a readiness check asks, so it stays
// cheap enough to run every few seconds:
//   - env: nil: a process's environment does not change.
//   - file: the file is read again, with every check Load makes (a regular
//     file, mode 0600 or tighter, not too large).
//   - keyring: the entry is still listed in the keyring. Its value is not
//     read: the file backend would decrypt it on every check, and the
//     passphrase it was opened with cannot have changed since.
//   - claude-code: the token held has not expired; Watch rereads Claude
//     Code's login as soon as it changes.
//
// The error may name the source's file or keyring, as the log does; it
// never holds the value.
func (l *Live) Readable() error {
	kind, arg, _ := strings.Cut(string(l.source), ":")
	switch kind {
	case "file":
		_, err := l.loader.Load(l.source)
		return err
	case "keyring":
		return l.loader.listed(arg)
	case "claude-code":
		_, err := l.Current()
		return err
	}
	return nil
}
