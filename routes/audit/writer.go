package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// queueLen bounds the records waiting for the writer. A request never
// waits for the disk: when the writer is this far behind (a stalled pipe, a
// hung file system), records are dropped, counted and reported.
const queueLen = 4096

// lostEvery is how often a still-failing audit log is reported again.
const lostEvery = time.Minute

// checkEvery is how often the writer checks that its file is still
// the one at the path: records written to a file deleted in between are
// lost, so this bounds the loss to about a second's records.
const checkEvery = time.Second

// Writer writes the audit records, JSON lines, to a file or to a stream
// such as stdout. Requests hand it whole lines (Write, as WriteJSON does);
// one goroutine writes them, in order, one write each. It is fail-open: a
// record that cannot be written is lost, not the request, and every loss
// is counted and logged as an ERROR; the next record that is written is
// preceded by a record saying how many were lost.
type Writer struct {
	path string // "" for a stream
	name string // what the diagnostic log calls it: the path, or the stream's name
	log  *slog.Logger

	mu     sync.RWMutex // guards closed against sends on queue
	closed bool
	queue  chan item
	done   chan struct{}

	w io.Writer // the writer goroutine's own
	f *os.File  // nil for a stream
	// gone marks that the path could not be reopened after the file was
	// deleted, so that a failure is reported once, not every second.
	gone bool

	// lost counts records not written since the last report; full marks
	// that a full queue has been reported and not yet caught up with.
	lost    atomic.Int64
	full    atomic.Bool
	lastErr error
	lastLog time.Time
}

// item is a line to write, or a request to reopen the file.
type item struct {
	line   []byte
	reopen chan error
}

// OpenFile opens the audit file at path, created 0600 and appended to,
// and starts its writer. A marker beside it (runningMarker) tells the next
// OpenFile whether this writer was closed.
func OpenFile(path string, log *slog.Logger) (*Writer, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	l := newWriter(f, path, log)
	l.path, l.f = path, f
	l.markRunning()
	go l.run()
	return l, nil
}

// NewWriter starts a writer to w, a stream that is never reopened (stdout),
// which the diagnostic log calls name.
func NewWriter(w io.Writer, name string, log *slog.Logger) *Writer {
	l := newWriter(w, name, log)
	go l.run()
	return l
}

func newWriter(w io.Writer, name string, log *slog.Logger) *Writer {
	return &Writer{w: w, name: name, log: log, queue: make(chan item, queueLen), done: make(chan struct{})}
}

// runningMarker is the file that says a serve is writing the audit file at
// path: created when it opens the file, removed when it closes it. Found
// at start, it means the serve before was killed (SIGKILL, a crash, the
// machine stopping) and records of the requests it had in flight or queued
// may be missing. It sits beside the audit file, hidden, so that a
// rotation's pattern for the file does not take it.
func runningMarker(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".running")
}

// uncleanNotice is the notice written when the serve before did not close
// the audit log.
const uncleanNotice = "cproxy: the previous run of cproxy serve ended without a clean shutdown (killed, crashed or the machine stopped): records of the requests in flight or queued then may be missing"

// markRunning writes a notice to the file if the serve before it did not
// remove its marker, and creates the marker for this one. A marker that
// cannot be written only costs that notice next time; it is logged.
func (l *Writer) markRunning() {
	marker := runningMarker(l.path)
	if _, err := os.Stat(marker); err == nil {
		l.log.Warn("the previous cproxy serve did not shut down cleanly: audit records of its last requests may be missing", "audit", l.path)
		l.writeNotice(uncleanNotice)
	}
	if err := os.WriteFile(marker, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		l.log.Warn("audit log: cannot write the marker that tells an unclean shutdown at the next start", "marker", marker, "err", err.Error())
	}
}

// noticeRecord is the audit log's own record of something a reader of it
// should know: that records may be missing, and why.
type noticeRecord struct {
	Time   string `json:"time"`
	Notice string `json:"notice"`
}

// writeNotice writes a notice record; one that cannot be written is
// counted as a lost record.
func (l *Writer) writeNotice(text string) {
	line, _ := json.Marshal(noticeRecord{Time: time.Now().UTC().Format(TimeFormat), Notice: text})
	l.write(append(EscapeLineBreakers(line), '\n'))
}

func openFile(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

// Write queues one record (a whole line, which it copies); it never blocks
// on the disk and never fails: a record that cannot be queued is counted
// as lost.
func (l *Writer) Write(p []byte) (int, error) {
	item := item{line: bytes.Clone(p)}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.lost.Add(1)
		return len(p), nil
	}
	select {
	case l.queue <- item:
	default:
		l.lost.Add(1)
		if !l.full.Swap(true) {
			l.log.Error("audit log writer is behind: audit records are being dropped; requests are still served", "audit", l.name, "queued", queueLen)
		}
	}
	return len(p), nil
}

func (l *Writer) run() {
	defer close(l.done)
	var check <-chan time.Time
	if l.f != nil {
		t := time.NewTicker(checkEvery)
		defer t.Stop()
		check = t.C
	}
	for {
		select {
		case it, ok := <-l.queue:
			if !ok {
				if l.f != nil {
					l.f.Close()
				}
				return
			}
			if it.reopen != nil {
				it.reopen <- l.reopenFile()
				continue
			}
			l.write(it.line)
		case <-check:
			l.checkPath()
		}
	}
}

// checkPath reopens the audit file at its path when the open file is no
// longer there: deleted (its records since the last check are lost:
// logged as an ERROR, and a notice starts the new file), or renamed away
// without the SIGHUP that should follow (nothing is lost: logged at WARN).
// A path that cannot be looked at is left alone.
func (l *Writer) checkPath() {
	cur, err := l.f.Stat()
	if err != nil {
		return
	}
	at, err := os.Stat(l.path)
	switch {
	case err == nil && os.SameFile(at, cur):
		l.gone = false
		return
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return
	}
	deleted := false
	if st, ok := cur.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
		deleted = true
	}
	if err := l.reopenFile(); err != nil {
		if !l.gone {
			l.gone = true
			l.log.Error("audit log file is no longer at its path and cannot be reopened: records still go to the old file", "audit", l.path, "err", err.Error())
		}
		return
	}
	l.gone = false
	if !deleted {
		l.log.Warn("audit log file was renamed away without SIGHUP: reopened at its path", "audit", l.path)
		return
	}
	l.log.Error("audit log file was deleted while in use: reopened at its path; records written since the last check, up to a second's, are lost", "audit", l.path)
	l.writeNotice(fmt.Sprintf("cproxy: the audit file was deleted while in use and reopened at its path: records of up to %v before this one may be missing", checkEvery))
}

// write writes one line; after losses, a record that says how many first.
func (l *Writer) write(line []byte) {
	if n := l.lost.Load(); n > 0 && l.lastErr == nil {
		// Records were dropped while the queue was full, and this write is
		// the first since: say so in the log and in the file.
		l.lastErr = errors.New("the writer was behind: the audit queue was full")
	}
	if l.lastErr != nil {
		n := l.lost.Load()
		mark, _ := json.Marshal(lostRecord{Time: time.Now().UTC().Format(TimeFormat), Lost: n, Reason: "cproxy: " + l.lastErr.Error()})
		if _, err := l.w.Write(append(EscapeLineBreakers(mark), '\n')); err != nil {
			l.failed(err)
			return
		}
		l.lost.Add(-n)
		l.full.Store(false)
		l.log.Warn("audit log written again", "audit", l.name, "lost", n)
		l.lastErr = nil
	}
	if _, err := l.w.Write(line); err != nil {
		l.failed(err)
	}
}

// failed counts a record that could not be written and reports it: at
// once for the first, then at most once every lostEvery.
func (l *Writer) failed(err error) {
	n := l.lost.Add(1)
	first := l.lastErr == nil
	l.lastErr = err
	if first || time.Since(l.lastLog) >= lostEvery {
		l.lastLog = time.Now()
		l.log.Error("audit record not written; requests are still served", "audit", l.name, "lost", n, "err", err.Error())
	}
}

// lostRecord is the audit log's own record of records it could not write.
type lostRecord struct {
	Time   string `json:"time"`
	Lost   int64  `json:"lost"`
	Reason string `json:"reason"`
}

// Reopen reopens the file at its path, for rotation (SIGHUP): records
// queued before go to the old file, those after to the new one. A file
// that cannot be opened leaves the old one in use. A stream is not reopened.
func (l *Writer) Reopen() {
	if l == nil || l.path == "" {
		return
	}
	res := make(chan error, 1)
	select {
	case l.queue <- item{reopen: res}:
	case <-time.After(5 * time.Second):
		l.log.Error("audit log not reopened: its writer is stuck; records still go to the old file", "audit", l.path)
		return
	}
	if err := <-res; err != nil {
		l.log.Error("audit log not reopened; records still go to the old file", "audit", l.path, "err", err.Error())
		return
	}
	l.log.Info("audit log reopened", "audit", l.path)
}

func (l *Writer) reopenFile() error {
	f, err := openFile(l.path)
	if err != nil {
		return err
	}
	l.f.Close()
	l.w, l.f = f, f
	return nil
}

// Close writes what is queued, waiting at most d, and closes the file.
// Records that come after are counted as lost, and so are those still
// queued when d runs out; either is logged.
func (l *Writer) Close(d time.Duration) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	select {
	case <-l.done:
		if n := l.lost.Load(); n > 0 {
			l.log.Error("audit records were lost", "audit", l.name, "lost", n)
		}
		if l.path != "" {
			// Every record is written: the next start has nothing to warn of.
			os.Remove(runningMarker(l.path))
		}
	case <-time.After(d):
		l.log.Error("audit log not flushed: records still queued are lost", "audit", l.name, "queued", len(l.queue))
	}
}
