package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fileKeyring opens the file backend in a fresh directory; no test touches
// the user's own keyring.
func fileKeyring(t *testing.T, passphrase string) (*Keyring, KeyringConfig) {
	t.Helper()
	t.Setenv(PassphraseEnv, passphrase)
	cfg := KeyringConfig{Backend: BackendFile, FileDir: filepath.Join(t.TempDir(), "keyring")}
	k, err := OpenKeyring(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k, cfg
}

func TestFileKeyring(t *testing.T) {
	k, cfg := fileKeyring(t, "correct horse")
	if k.Backend() != BackendFile || !strings.HasPrefix(k.String(), "the file keyring at ") {
		t.Fatalf("backend %s, %s", k.Backend(), k)
	}
	if names, err := k.Names(); err != nil || len(names) != 0 {
		t.Fatalf("new keyring: %v %v", names, err)
	}
	for _, name := range []string{"upstream-key", "github.token", "a"} {
		if err := k.Set(name, New(canary+"-"+name)); err != nil {
			t.Fatalf("set %s: %v", name, err)
		}
	}
	// Replacing keeps one entry.
	if err := k.Set("a", New(canary)); err != nil {
		t.Fatal(err)
	}
	names, err := k.Names()
	if err != nil || !slices.Equal(names, []string{"a", "github.token", "upstream-key"}) {
		t.Fatalf("names %v, %v", names, err)
	}
	if s, err := k.Get("a"); err != nil || s.Reveal() != canary {
		t.Fatalf("get a: %v", err)
	}

	// The files hold no value in the clear, and only the owner may read them.
	entries, _ := os.ReadDir(cfg.FileDir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(cfg.FileDir, e.Name()))
		if strings.Contains(string(b), "canary") {
			t.Errorf("%s holds the value in the clear", e.Name())
		}
		if st, _ := os.Stat(filepath.Join(cfg.FileDir, e.Name())); st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", e.Name(), st.Mode())
		}
	}

	// A second process with the same passphrase reads it: the Loader.
	l := &Loader{Keyring: cfg}
	if s, err := l.Load("keyring:upstream-key"); err != nil || s.Reveal() != canary+"-upstream-key" {
		t.Fatalf("load: %v", err)
	}

	if err := k.Remove("upstream-key"); err != nil {
		t.Fatal(err)
	}
	if names, _ := k.Names(); slices.Contains(names, "upstream-key") {
		t.Errorf("removed entry still listed: %v", names)
	}
	err = k.Remove("upstream-key")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("removing twice: %v", err)
	}
}

func TestKeyringMissingEntry(t *testing.T) {
	_, cfg := fileKeyring(t, "pw")
	_, err := (&Loader{Keyring: cfg}).Load("keyring:upstream-key")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v", err)
	}
	want := "keyring:upstream-key: no such entry in the file keyring at " + cfg.FileDir + ": run cproxy secret set upstream-key"
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
}

func TestKeyringWrongPassphrase(t *testing.T) {
	k, cfg := fileKeyring(t, "right")
	if err := k.Set("upstream-key", New(canary)); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PassphraseEnv, "wrong")
	k2, err := OpenKeyring(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k2.Get("upstream-key")
	if !errors.Is(err, ErrWrongPassphrase) || !strings.Contains(err.Error(), PassphraseEnv) || strings.Contains(err.Error(), canary) {
		t.Fatalf("get: %v", err)
	}
	// Storing under another passphrase is refused too: one keyring, one passphrase.
	if err := k2.Set("other", New(canary)); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("set: %v", err)
	}
	if names, _ := k2.Names(); !slices.Equal(names, []string{"upstream-key"}) {
		t.Errorf("names %v", names)
	}
}

func TestKeyringNoPassphrase(t *testing.T) {
	k, cfg := fileKeyring(t, "pw")
	if err := k.Set("upstream-key", New(canary)); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PassphraseEnv, "")
	_, err := (&Loader{Keyring: cfg}).Load("keyring:upstream-key")
	if !errors.Is(err, ErrNoPassphrase) || !strings.Contains(err.Error(), "set "+PassphraseEnv) {
		t.Fatalf("got %v", err)
	}

	// A prompt answers when there is one; a new keyring asks to confirm.
	var asked []bool
	cfg.Prompt = func(_ string, confirm bool) (string, error) { asked = append(asked, confirm); return "pw", nil }
	if s, err := (&Loader{Keyring: cfg}).Load("keyring:upstream-key"); err != nil || s.Reveal() != canary {
		t.Fatalf("with a prompt: %v", err)
	}
	cfg.FileDir = filepath.Join(t.TempDir(), "new")
	k, err = OpenKeyring(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set("x", New(canary)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, []bool{false, true}) {
		t.Errorf("prompts (confirm?) %v", asked)
	}
	// A prompt that fails is not a wrong passphrase.
	cfg.Prompt = func(string, bool) (string, error) { return "", errors.New("interrupted") }
	_, err = (&Loader{Keyring: cfg}).Load("keyring:x")
	if err == nil || errors.Is(err, ErrWrongPassphrase) || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("failed prompt: %v", err)
	}
}

func TestKeyringNames(t *testing.T) {
	k, _ := fileKeyring(t, "pw")
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "a b", "-x", "x\n", strings.Repeat("a", 129), "sk-ant-api03-" + strings.Repeat("x", 120)} {
		if err := CheckName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
		if err := k.Set(bad, New(canary)); err == nil || strings.Contains(err.Error(), canary) {
			t.Errorf("set %q: %v", bad, err)
		}
		if _, err := (&Loader{}).Load(Source("keyring:" + bad)); err == nil {
			t.Errorf("load %q accepted", bad)
		}
	}
	for _, good := range []string{"a", "A.b_c-1", "9", strings.Repeat("a", 128)} {
		if err := CheckName(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

func TestKeyringBackends(t *testing.T) {
	if _, err := OpenKeyring(KeyringConfig{Backend: "wallet"}); err == nil || !strings.Contains(err.Error(), "not a backend") {
		t.Errorf("unknown backend: %v", err)
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "")
	if _, err := OpenKeyring(KeyringConfig{Backend: BackendFile}); err == nil || !strings.Contains(err.Error(), "keyring.file_dir") {
		t.Errorf("file backend without a directory: %v", err)
	}
	t.Setenv("XDG_DATA_HOME", "/data")
	if got := DefaultKeyringDir(); got != "/data/cproxy/keyring" {
		t.Errorf("DefaultKeyringDir = %q", got)
	}
}
