// Package watch follows a file that cproxy serve reads again when it
// changes: the policy file, and Claude Code's login. It looks at the file
// every so often with a stat, which costs next to nothing and sees a change
// however it was made (written in place, or a new file renamed over the
// old one) on any file system, where a notification API misses a rename
// over the watched file or a network mount's writes.
package watch

import (
	"context"
	"os"
	"time"
)

// Stamp is what one look at a file sees: its size, modification time and
// identity (an editor that saves by renaming a new file over the old one
// changes the inode, even when size and time look alike). The zero Stamp
// is a file that could not be looked at (removed, say).
type Stamp struct {
	info os.FileInfo
}

// Look stats the file at path.
func Look(path string) Stamp {
	info, err := os.Stat(path)
	if err != nil {
		return Stamp{}
	}
	return Stamp{info}
}

// Same reports whether a and b saw the same file, unchanged.
func (a Stamp) Same(b Stamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil
	}
	return a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime()) && os.SameFile(a.info, b.info)
}

// File is one file followed for changes from when it was last read. Its
// methods are for one goroutine at a time.
type File struct {
	path string
	// settle: a change counts once two looks in a row see it the same.
	settle  bool
	read    Stamp  // the file as it was when last read
	pending *Stamp // settle: a change seen once
}

// New follows the file at path. With settle, a change counts only once two
// looks in a row find the file the same, so that a file still being
// written is not read half-written; without, at the first look that sees
// it. Until Reading is called, the file counts as read when it could not
// be looked at.
func New(path string, settle bool) *File {
	return &File{path: path, settle: settle}
}

// Path is the file followed.
func (f *File) Path() string { return f.path }

// Reading looks at the file as its caller is about to read it, and returns
// what it saw: from now on a change is a change from that. Looked at before
// the read, a change made while reading is seen by the next look.
func (f *File) Reading() Stamp {
	f.read, f.pending = Look(f.path), nil
	return f.read
}

// Changed looks at the file once and reports a change from when it was
// last read, each change once: the caller reads it (calling Reading), or
// the next look that sees the same again reports nothing.
func (f *File) Changed() bool {
	st := Look(f.path)
	switch {
	case st.Same(f.read):
		f.pending = nil
		return false
	case f.settle && (f.pending == nil || !st.Same(*f.pending)):
		f.pending = &st
		return false
	}
	f.pending = nil
	return true
}

// Every calls look every interval, on the goroutine that calls it, until
// ctx is done: the loop of a watcher, whose look asks Changed.
func Every(ctx context.Context, interval time.Duration, look func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			look()
		}
	}
}
