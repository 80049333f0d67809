package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotStorable reports a source cproxy can read but not write: an env:
// variable (a process cannot change what started it) or Claude Code's
// login (Claude Code owns it).
var ErrNotStorable = errors.New("this source cannot be written")

// Store writes s to the credential's source and holds it from now on, as a
// credential that its upstream replaced (an OAuth server that rotates its
// refresh tokens): a file: source is replaced whole (a new file renamed over
// it, mode 0600, so that a reader sees the old value or the new, never half
// of one), a keyring: entry is set. An env: or claude-code source is not
// written (ErrNotStorable): s is held in memory alone, and the source keeps
// the old value for the next start. The error names the source, never the
// value.
func (l *Live) Store(s Secret) error {
	if s.IsZero() || strings.ContainsAny(s.v, "\r\n") {
		return fmt.Errorf("%s: %w: the new value is empty or spans lines", l.source, ErrUnset)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cur.Load()
	l.cur.Store(&held{secret: s, expires: old.expires, where: old.where})
	kind, arg, _ := strings.Cut(string(l.source), ":")
	switch kind {
	case "file":
		return writeFile(arg, s)
	case "keyring":
		l.loader.mu.Lock()
		defer l.loader.mu.Unlock()
		if l.loader.ring == nil {
			return fmt.Errorf("keyring:%s: the keyring is not open", arg)
		}
		if err := l.loader.ring.Set(arg, s); err != nil {
			return fmt.Errorf("keyring:%w", err)
		}
		return nil
	}
	return fmt.Errorf("%s: %w", l.source, ErrNotStorable)
}

// writeFile replaces the credential file at path with s: written to a new
// file beside it, synced, and renamed over it.
func writeFile(path string, s Secret) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("file:%s: cannot write beside it: %w", path, errors.Unwrap(err))
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(s.v + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("file:%s: %w", path, err)
	}
	return nil
}
