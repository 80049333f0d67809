package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGitClone runs the git clone benchmark small: both ways clone, cproxy's
// memory is read, the tables come out.
func TestGitClone(t *testing.T) {
	if os.Getenv("CPROXY_BENCH") == "" {
		t.Skip("builds and starts cproxy and clones with git: set CPROXY_BENCH=1")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	res, err := RunGit(context.Background(), GitOptions{
		Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Dir: t.TempDir(), BigMiB: 4, SmallMiB: 2, Files: 2, Reps: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rr := range res.Repos {
		if len(rr.Clones) != 2 || rr.Peak == 0 || rr.PackBytes < 1<<20 {
			t.Errorf("%s: %+v", rr.Repo, rr)
		}
	}
	var b bytes.Buffer
	res.Markdown(&b)
	if !strings.Contains(b.String(), "| acme/big | 4.0 MiB | 1 | cproxy |") {
		t.Errorf("tables:\n%s", b.String())
	}
}
