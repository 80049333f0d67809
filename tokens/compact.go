package tokens

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// compactTxMaxSize is how much of the copy one transaction holds before it commits (bbolt's own compact command's
// default), so that compacting takes little memory whatever the store's size.
const compactTxMaxSize = 64 << 10

// CompactBolt rewrites the embedded store at path into a new file that holds only its records, renames that over
// path, and returns the file's size before and after. bbolt reuses the pages that deleted records free, so a store
// under churn stops growing, but it never hands them back: the file keeps the size of its fullest day until it is
// compacted.
//
// The store must not be in use. CompactBolt holds the store's lock throughout: it fails with an error wrapping
// ErrLocked while a cproxy serves the store, and a cproxy started meanwhile fails the same way, or, once the lock
// is let go, opens the new file (openFile). A file that is not a store of ours, or is at a newer schema than this
// code knows, is refused as OpenBolt refuses it. The new file has the old one's mode and owner, and it and then
// the directory are synced before CompactBolt returns, so a crash leaves the old file or the new one at path (and
// at worst a PATH.compact-* file to delete). A path that is a symbolic link is refused with ErrSymlink: the store
// stays where it is.
func CompactBolt(path string) (before, after int64, err error) {
	return compactBolt(path, func() string { return path + ".compact-" + rand.Text()[:12] })
}

// ErrSymlink is what CompactBolt returns for a store path that is a symbolic link: compacting renames the new file
// over the link, not its target, so the target would keep the old tokens, revoked ones included, for anyone who
// points the link back at it.
var ErrSymlink = errors.New("the token store is a symbolic link")

// compactBolt is CompactBolt with the temporary file's name from tempName.
func compactBolt(path string, tempName func() string) (before, after int64, err error) {
	// bbolt would make a new store where there is none.
	if err := notSymlink(path); err != nil {
		return 0, 0, err
	}
	src, err := openFile(path)
	if err != nil {
		return 0, 0, err
	}
	defer src.Close()
	if err := noPanic(func() error {
		return src.View(func(tx *bolt.Tx) error { _, err := schemaOf(tx, path); return err })
	}); err != nil {
		if _, ok := err.(panicError); ok {
			return 0, 0, notAStore(path, err)
		}
		return 0, 0, err
	}
	// The file the lock is on (openFile), which may have replaced the one there before, and may not be a link.
	if err := notSymlink(path); err != nil {
		return 0, 0, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
	}
	// The new file is made here, never a file or link already there (O_EXCL, O_NOFOLLOW), and everything after is
	// done through its descriptor: whoever may write to the folder can rename or replace the name meanwhile, but
	// cannot have a chmod or chown, as root, land on a file of theirs choosing.
	tmpName := tempName()
	tmp, err := os.OpenFile(tmpName, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, 0, fmt.Errorf("compact token store %s: making its new file: %w", path, err)
	}
	defer tmp.Close()
	defer func() {
		if err != nil {
			removeIfSame(tmpName, tmp)
		}
	}()
	if err := copyCompacted(src, tmp, info); err != nil {
		return 0, 0, fmt.Errorf("compact token store %s: %w", path, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return 0, 0, fmt.Errorf("compact token store %s: %w", path, err)
	}
	made, err := tmp.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
	}
	if at, err := os.Lstat(path); err != nil || !os.SameFile(at, made) {
		return 0, 0, fmt.Errorf("compact token store %s: the file there now is not the one compacting wrote: something else in %s renamed or replaced it meanwhile; check the store before starting cproxy", path, filepath.Dir(path))
	}
	return info.Size(), made.Size(), nil
}

// notSymlink refuses a path that is a symbolic link, and one where there is nothing.
func notSymlink(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("compact token store: no store at %s", path)
	case err != nil:
		return fmt.Errorf("compact token store: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return fmt.Errorf("%w: %s links to %s", ErrSymlink, path, target)
	}
	return nil
}

// removeIfSame removes name if it is still the file f.
func removeIfSame(name string, f *os.File) {
	at, err := os.Lstat(name)
	if err != nil {
		return
	}
	if made, err := f.Stat(); err == nil && os.SameFile(at, made) {
		os.Remove(name)
	}
}

// copyCompacted copies every bucket of src into the new, empty file dst, syncs it, and gives it the mode and owner
// of the file info describes, all through dst's descriptor.
func copyCompacted(src *bolt.DB, dst *os.File, info fs.FileInfo) error {
	// bbolt opens the file by name; it is given a copy of dst's descriptor instead, for it to close.
	open := func(string, int, os.FileMode) (*os.File, error) {
		fd, err := syscall.Dup(int(dst.Fd()))
		if err != nil {
			return nil, err
		}
		syscall.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), dst.Name()), nil
	}
	// One sync at the end, instead of one for each transaction of the copy.
	db, err := bolt.Open(dst.Name(), info.Mode().Perm(), &bolt.Options{NoSync: true, OpenFile: open})
	if err != nil {
		return err
	}
	if err := bolt.Compact(db, src, compactTxMaxSize); err != nil {
		db.Close()
		return err
	}
	if err := db.Sync(); err != nil {
		db.Close()
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	if err := dst.Chmod(info.Mode().Perm()); err != nil {
		return err
	}
	// Under a service manager the store belongs to the service's user, and compacting it as root must not leave it
	// to root.
	want, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	made, err := dst.Stat()
	if err != nil {
		return err
	}
	if got, ok := made.Sys().(*syscall.Stat_t); ok && got.Uid == want.Uid && got.Gid == want.Gid {
		return nil
	}
	if err := dst.Chown(int(want.Uid), int(want.Gid)); err != nil {
		return err
	}
	return dst.Sync()
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
