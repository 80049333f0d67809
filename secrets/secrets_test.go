package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const canary = "sk-ant-canary-secrets-0123456789"

func TestSecretRedactsEverywhere(t *testing.T) {
	s := New(canary)
	var buf bytes.Buffer
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		fmt.Fprintf(&buf, f+"\n", s)
	}
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "cred", s)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "cred", s)
	b, _ := json.Marshal(struct{ S Secret }{s})
	buf.Write(b)
	if strings.Contains(buf.String(), canary) || strings.Contains(buf.String(), "canary") {
		t.Fatalf("secret leaked:\n%s", buf.String())
	}
	if s.Reveal() != canary {
		t.Fatal("Reveal lost the value")
	}
}

func TestEnvSource(t *testing.T) {
	t.Setenv("CPROXY_TEST_CRED", "  "+canary+"\n")
	s, err := Source("env:CPROXY_TEST_CRED").Load()
	if err != nil || s.Reveal() != canary {
		t.Fatalf("got %v", err)
	}
	t.Setenv("CPROXY_TEST_CRED", "")
	_, err = Source("env:CPROXY_TEST_CRED").Load()
	if !errors.Is(err, ErrUnset) || !strings.Contains(err.Error(), "export CPROXY_TEST_CRED") {
		t.Fatalf("got %v", err)
	}
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(canary+"\n"), 0o600)
	if s, err := Source("file:" + good).Load(); err != nil || s.Reveal() != canary {
		t.Fatalf("got %v", err)
	}

	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte(canary), 0o644)
	os.Chmod(open, 0o644)
	_, err := Source("file:" + open).Load()
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+open) {
		t.Fatalf("group/world readable file: got %v", err)
	}

	two := filepath.Join(dir, "two")
	os.WriteFile(two, []byte(canary+"\nsecond"), 0o600)
	_, err = Source("file:" + two).Load()
	if err == nil || strings.Contains(err.Error(), canary) {
		t.Fatalf("two lines: got %v", err)
	}

	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	if _, err := Source("file:" + empty).Load(); !errors.Is(err, ErrUnset) {
		t.Fatalf("empty: got %v", err)
	}
	if _, err := Source("file:" + filepath.Join(dir, "missing")).Load(); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing: got %v", err)
	}
	if _, err := Source("file:" + dir).Load(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: got %v", err)
	}
}

func TestUnknownSources(t *testing.T) {
	if s, err := Source("").Load(); err != nil || !s.IsZero() {
		t.Fatalf("empty source: %v", err)
	}
	for _, src := range []string{"vault:x", "claude-code:x"} {
		if _, err := Source(src).Load(); err == nil {
			t.Errorf("%s: loaded", src)
		}
	}
}

// A private key's file may hold its PEM's lines (LiveKey); a token's may
// not.
func TestKeyFileLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.pem")
	pemText := "-----BEGIN RSA PRIVATE KEY-----\nAAAA\nBBBB\n-----END RSA PRIVATE KEY-----\n"
	if err := os.WriteFile(path, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	l := new(Loader)
	if _, err := l.Live("github", Source("file:"+path), nil); err == nil || !strings.Contains(err.Error(), "more than one line") {
		t.Errorf("a token's file of several lines: %v", err)
	}
	lv, err := l.LiveKey("github.app", Source("file:"+path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := lv.Current(); got.Reveal() != strings.TrimSpace(pemText) {
		t.Errorf("got %q", got.Reveal())
	}
}

func TestPEMSource(t *testing.T) {
	const doc = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIC" + canary + "\n-----END EC PRIVATE KEY-----"
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, []byte(doc+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := new(Loader)
	// A file holds the document as it is; Load, for one-line credentials,
	// refuses it.
	if s, err := l.LoadPEM(Source("file:" + path)); err != nil || s.Reveal() != doc {
		t.Errorf("LoadPEM(file:) = %q, %v; want the document", s.Reveal(), err)
	}
	if _, err := l.Load(Source("file:" + path)); err == nil {
		t.Error("Load took a file of several lines")
	}
	// A file others may read is refused, as for every credential.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LoadPEM(Source("file:" + path)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("LoadPEM took a key file of mode 0644: %v", err)
	}
	// env: (and keyring:) hold it base64-encoded, on one line.
	t.Setenv("CPROXY_TEST_PEM", base64.StdEncoding.EncodeToString([]byte(doc)))
	if s, err := l.LoadPEM("env:CPROXY_TEST_PEM"); err != nil || s.Reveal() != doc {
		t.Errorf("LoadPEM(env: base64) = %q, %v; want the document", s.Reveal(), err)
	}
	t.Setenv("CPROXY_TEST_PEM", canary)
	if _, err := l.LoadPEM("env:CPROXY_TEST_PEM"); err == nil || strings.Contains(err.Error(), canary) {
		t.Errorf("LoadPEM(env: not PEM) = %v; want an error without the value", err)
	}
}
