package tokens

import (
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
// at worst a PATH.compact-* file to delete).
func CompactBolt(path string) (before, after int64, err error) {
	// bbolt would make a new store where there is none.
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, 0, fmt.Errorf("compact token store: no store at %s", path)
	} else if err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
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
	// The file the lock is on (openFile), which may have replaced the one there before.
	info, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".compact-*")
	if err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
	}
	tmp.Close()
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err := copyCompacted(src, tmp.Name(), info); err != nil {
		return 0, 0, fmt.Errorf("compact token store %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return 0, 0, fmt.Errorf("compact token store %s: %w", path, err)
	}
	compacted, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("compact token store: %w", err)
	}
	return info.Size(), compacted.Size(), nil
}

// copyCompacted copies every bucket of src into the new, empty file at dst, syncs it, and gives it the mode and
// owner of the file info describes.
func copyCompacted(src *bolt.DB, dst string, info fs.FileInfo) error {
	// One sync at the end, instead of one for each transaction of the copy.
	db, err := bolt.Open(dst, info.Mode().Perm(), &bolt.Options{NoSync: true})
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
	if err := os.Chmod(dst, info.Mode().Perm()); err != nil {
		return err
	}
	// Under a service manager the store belongs to the service's user, and compacting it as root must not leave it
	// to root.
	want, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	made, err := os.Stat(dst)
	if err != nil {
		return err
	}
	if got, ok := made.Sys().(*syscall.Stat_t); ok && got.Uid == want.Uid && got.Gid == want.Gid {
		return nil
	}
	return os.Chown(dst, int(want.Uid), int(want.Gid))
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
