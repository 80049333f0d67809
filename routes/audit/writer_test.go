package audit

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
)

// failOnce is a stream whose first write fails.
type failOnce struct {
	testutil.Buffer
	failed bool
}

func (f *failOnce) Write(p []byte) (int, error) {
	if !f.failed {
		f.failed = true
		return 0, errors.New("disk full")
	}
	return f.Buffer.Write(p)
}

// TestWriterCountsLostRecords: a record the stream does not take is lost,
// not retried, and the next record written is preceded by one saying how
// many were lost and why, as one JSON line; the loss is logged as an ERROR.
func TestAuditWriterCountsLostRecords(t *testing.T) {
	var logs testutil.Buffer
	out := &failOnce{}
	w := NewWriter(out, "stdout", slog.New(slog.NewTextHandler(&logs, nil)))
	w.Write([]byte("{\"n\":1}\n"))
	w.Write([]byte("{\"n\":2}\n"))
	w.Close(time.Minute)
	lines := strings.SplitAfter(out.String(), "\n")
	if len(lines) != 3 || lines[1] != "{\"n\":2}\n" || lines[2] != "" {
		t.Fatalf("written: %q", out.String())
	}
	var lost struct {
		Time   string
		Lost   int64
		Reason string
	}
	if err := json.Unmarshal([]byte(lines[0]), &lost); err != nil || lost.Lost != 1 || lost.Reason != "cproxy: disk full" {
		t.Errorf("lost record %q: %+v %v", lines[0], lost, err)
	}
	if _, err := time.Parse(TimeFormat, lost.Time); err != nil {
		t.Errorf("lost record's time: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR msg=\"audit record not written; requests are still served\" audit=stdout lost=1") {
		t.Errorf("log:\n%s", l)
	}
}

// TestWriterFileReopenAndMarker: records queued before Reopen go to the
// file that was renamed away, those after to a new file at the path; a
// marker beside the file says it is open until Close, and a marker left by
// a writer that was never closed puts a notice at the top of the next.
func TestAuditWriterFileReopenAndMarker(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	log := slog.New(slog.DiscardHandler)
	w, err := OpenFile(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(runningMarker(path)); err != nil {
		t.Errorf("no marker while open: %v", err)
	}
	w.Write([]byte("old\n"))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	w.Reopen()
	w.Write([]byte("new\n"))
	w.Close(time.Minute)
	for name, want := range map[string]string{path + ".1": "old\n", path: "new\n"} {
		if got, err := os.ReadFile(name); string(got) != want || err != nil {
			t.Errorf("%s: %q %v, want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(runningMarker(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker after Close: %v", err)
	}

	if err := os.WriteFile(runningMarker(path), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err = OpenFile(path, log)
	if err != nil {
		t.Fatal(err)
	}
	w.Close(time.Minute)
	got, _ := os.ReadFile(path)
	if lines := strings.Split(string(got), "\n"); len(lines) != 3 || !strings.Contains(lines[1], `"notice":"`+uncleanNotice+`"`) {
		t.Errorf("after an unclean stop: %q", got)
	}
}
