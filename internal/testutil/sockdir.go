package testutil

import (
	"os"
	"testing"
)

// shortBaseMax is the longest TMPDIR that socket folders go under. A Unix
// socket's path must fit in sun_path (108 bytes on Linux), and cproxy's
// own limit on listen.sandbox_sockets leaves 34 bytes for the folder so
// that DIR/SANDBOX.sock fits; a TMPDIR longer than this, with the
// folders a test makes inside it, leaves no room.
const shortBaseMax = 20

// NewSocketDir makes a new folder, mode 0700, for Unix sockets: under
// TMPDIR when that is short, else under /tmp. Tests put sockets here, not
// under t.TempDir() or testscript's $WORK, whose length depends on the
// user's TMPDIR. The caller removes it.
func NewSocketDir(prefix string) (string, error) {
	base := os.TempDir()
	if len(base) > shortBaseMax {
		if fi, err := os.Stat("/tmp"); err == nil && fi.IsDir() {
			base = "/tmp"
		}
	}
	return os.MkdirTemp(base, prefix)
}

// SocketDir is NewSocketDir for a test: the folder is removed when the test
// ends.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := NewSocketDir("cpx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
