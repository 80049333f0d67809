// Package secrets loads the real upstream credentials that cproxy injects, from
// the sources a config names, and keeps them from leaking: a Secret prints as
// REDACTED everywhere except in the one call that writes the upstream header.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package secrets

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fileSizeLimit bounds what a file: source may hold; a credential is a line,
// not a document, and a huge file is a mistake worth reporting.
const fileSizeLimit = 64 << 10

// ErrUnset reports a source that names nothing usable: an unset or empty
// environment variable, or an empty file.
var ErrUnset = errors.New("credential is not set")

// Secret holds a credential. Its zero value means "no credential".
type Secret struct{ v string }

// New wraps a value; tests and sources use it.
func New(v string) Secret { return Secret{v: v} }

// Reveal returns the credential. Only the code that writes an upstream
// request header calls it.
func (s Secret) Reveal() string { return s.v }

// IsZero reports whether no credential is held.
func (s Secret) IsZero() bool { return s.v == "" }

func (s Secret) String() string               { return "REDACTED" }
func (s Secret) GoString() string             { return "REDACTED" }
func (s Secret) Format(f fmt.State, _ rune)   { f.Write([]byte("REDACTED")) }
func (s Secret) LogValue() slog.Value         { return slog.StringValue("REDACTED") }
func (s Secret) MarshalText() ([]byte, error) { return []byte("REDACTED"), nil }

// Source is where a credential comes from, as written in the config:
// "env:NAME", "file:PATH", "keyring:NAME", "claude-code", or "" for none.
type Source string

// Kind returns the part before the colon ("env", "file", "keyring",
// "claude-code") or "" for no source.
func (s Source) Kind() string {
	k, _, _ := strings.Cut(string(s), ":")
	return k
}

// Load reads the credential with the default keyring (see KeyringConfig);
// a program that has a config uses a Loader. An empty source loads the zero
// Secret. Errors name the source (never the value) and say how to fix it.
func (s Source) Load() (Secret, error) { return new(Loader).Load(s) }

// Loader loads credentials. It opens the keyring on the first keyring:NAME
// source and keeps it for the next, so a passphrase is asked for once.
type Loader struct {
	// Keyring is the keyring that keyring:NAME sources read. The zero value
	// means the defaults.
	Keyring KeyringConfig

	mu      sync.Mutex // guards the keyring, opened on first use
	ring    *Keyring
	ringErr error
}

// Load reads the credential s names. An empty source loads the zero Secret.
// Errors name the source (never the value) and say how to fix it.
func (l *Loader) Load(s Source) (Secret, error) { return l.load(s, false) }

// load is Load; lines lets a file: source hold more than one line (a PEM
// key), which a token never does.
func (l *Loader) load(s Source, lines bool) (Secret, error) {
	kind, arg, _ := strings.Cut(string(s), ":")
	switch kind {
	case "":
		return Secret{}, nil
	case "env":
		v := strings.TrimSpace(os.Getenv(arg))
		if v == "" {
			return Secret{}, fmt.Errorf("env:%s: %w: export %s before starting cproxy", arg, ErrUnset, arg)
		}
		return Secret{v: v}, nil
	case "file":
		return loadFile(arg, lines)
	case "keyring":
		return l.loadKeyring(arg)
	case "claude-code":
		if arg != "" || strings.Contains(string(s), ":") {
			break
		}
		// Claude Code's own login; an expired token is an error here. A
		// server that keeps running uses a Live, which waits for the refresh.
		login, err := readClaudeCode(time.Now())
		if err != nil {
			return Secret{}, err
		}
		return login.token, nil
	}
	return Secret{}, fmt.Errorf("%q: unknown credential source: use env:NAME, file:PATH, keyring:NAME or claude-code", string(s))
}

func (l *Loader) loadKeyring(name string) (Secret, error) {
	if err := CheckName(name); err != nil {
		return Secret{}, fmt.Errorf("keyring:%s: %w", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ring == nil && l.ringErr == nil {
		l.ring, l.ringErr = OpenKeyring(l.Keyring)
	}
	if l.ringErr != nil {
		return Secret{}, fmt.Errorf("keyring:%s: %w", name, l.ringErr)
	}
	v, err := l.ring.Get(name)
	if errors.Is(err, ErrNoPassphrase) {
		// About the keyring, not the entry: the message names no entry.
		return Secret{}, fmt.Errorf("keyring:%s: %w", name, err)
	}
	if errors.Is(err, ErrNotFound) {
		return Secret{}, fmt.Errorf("keyring:%w: run cproxy secret set %s", err, name)
	}
	if err != nil {
		return Secret{}, fmt.Errorf("keyring:%w", err)
	}
	return v, nil
}

// listed reports whether the keyring entry name is there, reading no value
// (Live.Readable).
func (l *Loader) listed(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ring == nil {
		// Live holds a keyring credential only once Load opened the ring.
		return fmt.Errorf("keyring:%s: the keyring is not open", name)
	}
	names, err := l.ring.Names()
	if err != nil {
		return fmt.Errorf("keyring:%s: %w", name, err)
	}
	if !slices.Contains(names, name) {
		return fmt.Errorf("keyring:%s: %w in %s: run cproxy secret set %s", name, ErrNotFound, l.ring, name)
	}
	return nil
}

// LoadPEM reads a PEM document s names, such as a TLS private key: a
// file: holds it as it is, line breaks and all (mode 0600, as every
// credential file); an env: or keyring: source, which holds one line,
// holds the whole file base64-encoded (base64 -w0 key.pem). Errors never
// quote the value.
func (l *Loader) LoadPEM(s Source) (Secret, error) {
	v, err := l.load(s, true)
	if err != nil || strings.HasPrefix(v.v, "-----BEGIN ") {
		return v, err
	}
	b, err := base64.StdEncoding.DecodeString(v.v)
	if err != nil || !strings.Contains(string(b), "-----BEGIN ") {
		return Secret{}, fmt.Errorf("%s: neither a PEM document nor one base64-encoded (store the file as base64 -w0 FILE prints it)", s)
	}
	return Secret{v: string(b)}, nil
}

func loadFile(path string, lines bool) (Secret, error) {
	// Opened without blocking: a FIFO's open waits for a writer, and SIGHUP
	// rereads credentials on the signal loop. Its kind is checked below.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Secret{}, fmt.Errorf("file:%s: no such file", path)
		}
		return Secret{}, fmt.Errorf("file:%s: cannot open: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Secret{}, fmt.Errorf("file:%s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return Secret{}, fmt.Errorf("file:%s: not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Secret{}, fmt.Errorf("file:%s: readable by group or others (mode %04o): run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	if st.Size() > fileSizeLimit {
		return Secret{}, fmt.Errorf("file:%s: %d bytes is too large for a credential", path, st.Size())
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return Secret{}, fmt.Errorf("file:%s: %w", path, err)
	}
	// Never include file contents in an error: it is a credential.
	v := strings.TrimSpace(string(b))
	if v == "" {
		return Secret{}, fmt.Errorf("file:%s: %w: the file is empty", path, ErrUnset)
	}
	if !lines && strings.ContainsAny(v, "\r\n") {
		return Secret{}, fmt.Errorf("file:%s: holds more than one line; a credential file holds the credential alone", path)
	}
	return Secret{v: v}, nil
}
