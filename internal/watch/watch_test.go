package watch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// write replaces the file's content and gives it a modification time of
// its own, so that a look tells it from the last however coarse the file
// system's clock.
func write(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// Without settle, the first look after a change reports it, once; a
// reread file reports nothing until it changes again, removal included.
func TestChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	at := time.Now().Add(-time.Hour)
	write(t, path, "one", at)
	f := New(path, false)
	f.Reading()
	if f.Changed() {
		t.Fatal("an unchanged file changed")
	}
	write(t, path, "two", at.Add(time.Second))
	if !f.Changed() {
		t.Fatal("a rewrite was not seen")
	}
	f.Reading()
	if f.Changed() {
		t.Fatal("a file read again still counts as changed")
	}
	os.Remove(path)
	if !f.Changed() {
		t.Fatal("a removal was not seen")
	}
	f.Reading()
	if f.Changed() {
		t.Fatal("a file that stays removed keeps changing")
	}
}

// With settle, a change counts at the second look that sees it the same,
// and a file still changing between looks does not count.
func TestChangedSettles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	at := time.Now().Add(-time.Hour)
	write(t, path, "one", at)
	f := New(path, true)
	f.Reading()
	write(t, path, "two", at.Add(time.Second))
	if f.Changed() {
		t.Fatal("a change counted at its first look")
	}
	write(t, path, "three", at.Add(2*time.Second))
	if f.Changed() {
		t.Fatal("a file still changing counted")
	}
	if !f.Changed() {
		t.Fatal("a change seen twice the same did not count")
	}
	f.Reading()
	for range 2 {
		if f.Changed() {
			t.Fatal("a file read again still counts as changed")
		}
	}
}

// A new file renamed over the old one, as editors save, is a change even
// with the same size and modification time.
func TestRenameIsAChange(t *testing.T) {
	dir := t.TempDir()
	path, next := filepath.Join(dir, "f"), filepath.Join(dir, "f.new")
	at := time.Now().Add(-time.Hour)
	write(t, path, "one", at)
	f := New(path, false)
	f.Reading()
	write(t, next, "two", at)
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	if !f.Changed() {
		t.Fatal("a rename over the file was not seen")
	}
}

// Every looks every interval, and returns when its context is done.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	looks := make(chan struct{})
	done := make(chan struct{})
	go func() {
		Every(ctx, time.Millisecond, func() { looks <- struct{}{} })
		close(done)
	}()
	<-looks
	<-looks
	cancel()
	for {
		select {
		case <-done:
			return
		case <-looks:
		}
	}
}
