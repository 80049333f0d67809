package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cproxy/cproxy/tokens"
)

// `cproxy store compact`, run as root on a store whose folder another user
// owns: that user swaps compact's new file, the moment it appears, for a
// link to a file of root's. Compact works on the file it made through its
// descriptor, never by name, so root's file keeps its bytes, mode and
// owner; compact says the store was replaced meanwhile. A compact that
// chowned its new file by name would give root's file to the other user.
func TestStoreCompactTempSwappedForLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: compact chowns its new file to the store's owner only when it runs as another user")
	}
	dir := t.TempDir()
	folder := filepath.Join(dir, "store")
	if err := os.Mkdir(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(folder, "tokens.db")
	compactStoreOf(t, store, 600)
	const owner = 4242 // the store's user, not root
	for _, p := range []string{folder, store} {
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(dir, "root-only")
	const secret = "root's file\n"
	if err := os.WriteFile(victim, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}

	swapped := swapOnCreate(t, folder, ".compact-", victim)
	out, err := exec.Command("cproxy", "store", "compact", "--store", store).CombinedOutput()
	// Wakes the watcher if compact made no file.
	if err := os.WriteFile(filepath.Join(folder, watchEnd), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !<-swapped {
		t.Skipf("compact finished before the other user could swap its new file: %s", out)
	}
	if err == nil {
		t.Errorf("compact succeeded with its new file swapped for a link:\n%s", out)
	}
	if !strings.Contains(string(out), "renamed or replaced it meanwhile") {
		t.Errorf("compact did not say the store was replaced:\n%s", out)
	}
	fi, err := os.Lstat(victim)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 0 || st.Gid != 0 || fi.Mode() != 0o600 {
		t.Errorf("root's file is now %v, owned by %d:%d", fi.Mode(), st.Uid, st.Gid)
	}
	if b, _ := os.ReadFile(victim); string(b) != secret {
		t.Errorf("root's file now holds %d bytes", len(b))
	}
}

// compactStoreOf makes an embedded store at path with n live tokens of 8
// KiB each, enough that compacting it takes a while.
func compactStoreOf(t *testing.T, path string, n int) {
	t.Helper()
	s, err := tokens.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for range n {
		tok, err := tokens.New()
		if err != nil {
			t.Fatal(err)
		}
		rec := tokens.Record{Sandbox: "conv-1", CreatedAt: now, ExpiresAt: now.Add(time.Hour), Values: make([]byte, 8<<10)}
		if err := s.Create(context.Background(), tok.Hash(), rec); err != nil {
			t.Fatal(err)
		}
	}
}

// watchEnd is the file whose making ends swapOnCreate's watch.
const watchEnd = "watch-end"

// swapOnCreate watches folder, as the user who owns it could, for the
// first file made there whose name holds marker, and swaps it for a link
// to target: the file is moved aside and the link takes its name. The
// channel says whether it swapped one; the making of a file named
// watchEnd ends the watch.
func swapOnCreate(t *testing.T, folder, marker, target string) <-chan bool {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.InotifyAddWatch(fd, folder, syscall.IN_CREATE); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() {
		defer syscall.Close(fd)
		buf := make([]byte, 64<<10)
		for {
			n, err := syscall.Read(fd, buf)
			if err != nil {
				done <- false
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+int(ev.Len)], "\x00"))
				off += syscall.SizeofInotifyEvent + int(ev.Len)
				if name == watchEnd {
					done <- false
					return
				}
				if !strings.Contains(name, marker) {
					continue
				}
				p := filepath.Join(folder, name)
				if os.Rename(p, filepath.Join(folder, "moved-aside")) != nil {
					done <- false
					return
				}
				done <- os.Symlink(target, p) == nil
				return
			}
		}
	}()
	return done
}
