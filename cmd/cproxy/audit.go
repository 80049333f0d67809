package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/routes"
)

// The audit log (log.audit): serve's writer, reopened on SIGHUP, and
// `cproxy audit`, its reader.

// auditQueue bounds the records waiting for the writer. A request never
// waits for the disk: when the writer is this far behind (a stalled pipe, a
// hung file system), records are dropped, counted and reported.
const auditQueue = 4096

// auditLostEvery is how often a still-failing audit log is reported again.
const auditLostEvery = time.Minute

// auditCheckEvery is how often the writer checks that its file is still
// the one at the path: records written to a file deleted in between are
// lost, so this bounds the loss to about a second's records.
const auditCheckEvery = time.Second

// auditLog writes the audit records, JSON lines, to a file or to stdout.
// Requests hand it whole lines (Write); one goroutine writes them, in
// order, one write each. It is fail-open: a record that cannot be written
// is lost, not the request, and every loss is counted and logged as an
// ERROR; the next record that is written is preceded by a record saying how
// many were lost.
type auditLog struct {
	path string // "" for stdout
	log  *slog.Logger

	mu     sync.RWMutex // guards closed against sends on queue
	closed bool
	queue  chan auditItem
	done   chan struct{}

	w io.Writer // the writer goroutine's own
	f *os.File  // nil for stdout
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

// auditItem is a line to write, or a request to reopen the file.
type auditItem struct {
	line   []byte
	reopen chan error
}

// openAuditLog opens log.audit: stdout for config.AuditStdout, else the
// file, created 0600 and appended to.
func openAuditLog(dest string, stdout io.Writer, log *slog.Logger) (*auditLog, error) {
	l := &auditLog{log: log, queue: make(chan auditItem, auditQueue), done: make(chan struct{})}
	if dest == config.AuditStdout {
		l.w = stdout
	} else {
		l.path = dest
		f, err := openAuditFile(dest)
		if err != nil {
			return nil, err
		}
		l.w, l.f = f, f
		l.markRunning()
	}
	go l.run()
	return l, nil
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
func (l *auditLog) markRunning() {
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
func (l *auditLog) writeNotice(text string) {
	line, _ := json.Marshal(noticeRecord{Time: time.Now().UTC().Format(routes.AuditTimeFormat), Notice: text})
	l.write(append(routes.EscapeLineBreakers(line), '\n'))
}

// auditFlushTimeout bounds how long serve, stopping, waits for the audit
// records still queued to be written.
const auditFlushTimeout = 5 * time.Second

// serveAuditLog opens log.audit for serve, before any socket: nil when it
// is not set and the audit lines go to the diagnostic log.
func serveAuditLog(cfg *config.Config, stdout io.Writer, log *slog.Logger) (*auditLog, error) {
	if cfg.Log.Audit == "" {
		return nil, nil
	}
	l, err := openAuditLog(cfg.Log.Audit, stdout, log)
	if err != nil {
		return nil, fail("cproxy must be able to create or append to the file: check the directory's owner and mode", "%s", cfg.ProblemAt("log.audit", "%v", err))
	}
	return l, nil
}

// writer is l as routes.Options.AuditLog: nil for no audit log.
func (l *auditLog) writer() io.Writer {
	if l == nil {
		return nil
	}
	return l
}

func openAuditFile(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

// Write queues one record (a whole line); it never blocks on the disk and
// never fails: a record that cannot be queued is counted as lost.
func (l *auditLog) Write(p []byte) (int, error) {
	item := auditItem{line: bytes.Clone(p)}
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
			l.log.Error("audit log writer is behind: audit records are being dropped; requests are still served", "audit", l.dest(), "queued", auditQueue)
		}
	}
	return len(p), nil
}

func (l *auditLog) dest() string {
	if l.path == "" {
		return config.AuditStdout
	}
	return l.path
}

func (l *auditLog) run() {
	defer close(l.done)
	var check <-chan time.Time
	if l.f != nil {
		t := time.NewTicker(auditCheckEvery)
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
func (l *auditLog) checkPath() {
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
	l.writeNotice(fmt.Sprintf("cproxy: the audit file was deleted while in use and reopened at its path: records of up to %v before this one may be missing", auditCheckEvery))
}

// write writes one line; after losses, a record that says how many first.
func (l *auditLog) write(line []byte) {
	if n := l.lost.Load(); n > 0 && l.lastErr == nil {
		// Records were dropped while the queue was full, and this write is
		// the first since: say so in the log and in the file.
		l.lastErr = errors.New("the writer was behind: the audit queue was full")
	}
	if l.lastErr != nil {
		n := l.lost.Load()
		mark, _ := json.Marshal(lostRecord{Time: time.Now().UTC().Format(routes.AuditTimeFormat), Lost: n, Reason: "cproxy: " + l.lastErr.Error()})
		if _, err := l.w.Write(append(routes.EscapeLineBreakers(mark), '\n')); err != nil {
			l.failed(err)
			return
		}
		l.lost.Add(-n)
		l.full.Store(false)
		l.log.Warn("audit log written again", "audit", l.dest(), "lost", n)
		l.lastErr = nil
	}
	if _, err := l.w.Write(line); err != nil {
		l.failed(err)
	}
}

// failed counts a record that could not be written and reports it: at
// once for the first, then at most once every auditLostEvery.
func (l *auditLog) failed(err error) {
	n := l.lost.Add(1)
	first := l.lastErr == nil
	l.lastErr = err
	if first || time.Since(l.lastLog) >= auditLostEvery {
		l.lastLog = time.Now()
		l.log.Error("audit record not written; requests are still served", "audit", l.dest(), "lost", n, "err", err.Error())
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
// that cannot be opened leaves the old one in use. Stdout is not reopened.
func (l *auditLog) Reopen() {
	if l == nil || l.path == "" {
		return
	}
	res := make(chan error, 1)
	select {
	case l.queue <- auditItem{reopen: res}:
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

func (l *auditLog) reopenFile() error {
	f, err := openAuditFile(l.path)
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
func (l *auditLog) Close(d time.Duration) {
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
			l.log.Error("audit records were lost", "audit", l.dest(), "lost", n)
		}
		if l.path != "" {
			// Every record is written: the next start has nothing to warn of.
			os.Remove(runningMarker(l.path))
		}
	case <-time.After(d):
		l.log.Error("audit log not flushed: records still queued are lost", "audit", l.dest(), "queued", len(l.queue))
	}
}

// jsonLogWriter is the writer of serve's JSON logs (log.format = "json"):
// each line slog writes, with the characters it leaves raw that a
// line-oriented reader or a terminal could take for a line break or a
// reordering escaped (routes.EscapeLineBreakers), as the audit file's are.
type jsonLogWriter struct{ w io.Writer }

// Write writes one line (slog writes each record in one Write).
func (j jsonLogWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(routes.EscapeLineBreakers(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "print a sandbox's audit records, readably",
		Description: "Reads the audit log (log.audit in the config, or --file) and prints the records of the sandbox,\n" +
			"one line each: time, route, method, target, decision, status, duration, usage, rule and reason.\n" +
			"--sandbox takes an id or a pattern ('conv-*'; '*' for every record, unauthenticated requests included).\n" +
			"\n" +
			"Examples:\n" +
			"\n" +
			"   cproxy audit --config /etc/cproxy/cproxy.toml --sandbox conv-42\n" +
			"   cproxy audit --file audit.jsonl --sandbox 'conv-*' --follow",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "sandbox", Usage: "the sandbox `ID` or pattern ('*': all)", Required: true},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing records as they are written, across rotations"},
			&cli.StringFlag{Name: "file", Usage: "the audit log `PATH` (default: log.audit of --config)"},
			configFlag(),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text, or json (the records as written)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fail("usage: cproxy audit --sandbox ID [--follow] [--file PATH | --config FILE] [--format text|json]", "audit takes no arguments, got %q", c.Args().First())
			}
			o := auditOptions{sandbox: c.String("sandbox"), follow: c.Bool("follow"), file: c.String("file"), format: c.String("format")}
			if o.file == "" {
				file, err := auditFileOf(c.String("config"))
				if err != nil {
					return err
				}
				o.file = file
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runAudit(ctx, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// auditFileOf is the audit file a config names.
func auditFileOf(configFile string) (string, error) {
	if configFile == "" {
		return "", fail("pass --file PATH, or --config FILE with log.audit set", "no audit log to read")
	}
	cfg, err := loadConfig(configFile)
	if err != nil {
		return "", err
	}
	switch cfg.Log.Audit {
	case "":
		return "", fail(`set log.audit = "audit.jsonl" (a file) in the config and restart cproxy serve; until then the audit lines are in serve's standard error, as msg=request`, "%s: log.audit is not set: there is no audit file to read", configFile)
	case config.AuditStdout:
		return "", fail("read serve's standard output, or pass --file PATH where it is saved", `%s: log.audit is "stdout": there is no audit file to read`, configFile)
	}
	return cfg.Log.Audit, nil
}

type auditOptions struct {
	sandbox string // an id or a path.Match pattern
	follow  bool
	file    string
	format  string // "text" or "json"
}

// auditPoll is how often --follow looks for new records and a rotation.
const auditPoll = 200 * time.Millisecond

// maxAuditLine bounds one line read; a record is far smaller.
const maxAuditLine = 1 << 20

func runAudit(ctx context.Context, o auditOptions, stdout, stderr io.Writer) error {
	if _, err := path.Match(o.sandbox, ""); err != nil || o.sandbox == "" {
		return fail("give a sandbox id, a pattern such as 'conv-*', or '*' for all", "--sandbox %q is not a sandbox id or pattern", o.sandbox)
	}
	if o.format != "text" && o.format != "json" {
		return fail("", `--format %q: use "text" or "json"`, o.format)
	}
	f, err := os.Open(o.file)
	if err != nil {
		return fail("", "audit log: %v", err)
	}
	p := &auditPrinter{o: o, w: bufio.NewWriter(stdout), stderr: stderr, name: o.file}
	r := &auditReader{f: f, path: o.file}
	defer func() { r.f.Close() }()
	for {
		if err := r.readLines(p.line); err != nil {
			return fail("", "audit log: %v", err)
		}
		if err := p.w.Flush(); err != nil {
			return nil // stdout went away (a closed pipe): nothing more to do
		}
		if !o.follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(auditPoll):
		}
		r.rotated()
	}
}

// auditReader reads whole lines of a file that may grow, be rotated
// (renamed, then a new file at its path) or truncated.
type auditReader struct {
	f       *os.File
	path    string
	partial []byte // a line not yet ended
}

func (r *auditReader) readLines(each func([]byte)) error {
	br := bufio.NewReaderSize(r.f, 64<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(r.partial)+len(chunk) <= maxAuditLine {
			r.partial = append(r.partial, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if err == io.EOF {
				return nil // keep the partial line for when it ends
			}
			return err
		}
		each(r.partial)
		r.partial = r.partial[:0]
	}
}

// rotated switches to the file now at the path when it is another file (a
// rotation: the rest of the old one is read first), and starts over when
// the file shrank (truncated in place).
func (r *auditReader) rotated() {
	now, err := os.Stat(r.path)
	if err != nil {
		return // between the rename and serve's reopen
	}
	cur, err := r.f.Stat()
	if err != nil {
		return
	}
	if os.SameFile(now, cur) {
		if off, err := r.f.Seek(0, io.SeekCurrent); err == nil && now.Size() < off {
			r.f.Seek(0, io.SeekStart)
			r.partial = r.partial[:0]
		}
		return
	}
	f, err := os.Open(r.path)
	if err != nil {
		return
	}
	// What serve wrote to the old file before it reopened is read first.
	r.readLines(func([]byte) {})
	r.f.Close()
	r.f, r.partial = f, r.partial[:0]
}

type auditPrinter struct {
	o      auditOptions
	w      *bufio.Writer
	stderr io.Writer
	name   string
	bad    bool // a line that is not a record has been reported
}

// auditLine is what the reader decodes: a request's record, or the writer's
// record of lost ones.
type auditLine struct {
	routes.AuditRecord
	Lost   int64  `json:"lost"`
	Notice string `json:"notice"`
}

func (p *auditPrinter) line(b []byte) {
	var rec auditLine
	if err := json.Unmarshal(b, &rec); err != nil || rec.Time == "" {
		if !p.bad && len(bytes.TrimSpace(b)) > 0 {
			p.bad = true
			fmt.Fprintf(p.stderr, "cproxy: %s: skipping lines that are not audit records\n", p.name)
		}
		return
	}
	if rec.Lost == 0 && rec.Notice == "" {
		if ok, _ := path.Match(p.o.sandbox, rec.Sandbox); !ok {
			return
		}
	}
	if p.o.format == "json" {
		p.w.Write(routes.EscapeLineBreakers(bytes.TrimRight(b, "\n")))
		p.w.WriteByte('\n')
		return
	}
	p.w.WriteString(formatAuditRecord(rec, strings.ContainsAny(p.o.sandbox, "*?[")))
	p.w.WriteByte('\n')
}

// formatAuditRecord is one readable line: time, [sandbox,] route, method,
// target (or path), decision, status, duration, usage, rule, reason, and
// what the record says was cut. Every string is quoted where it could
// otherwise split or read differently (quoteIfNeeded).
func formatAuditRecord(rec auditLine, sandbox bool) string {
	if rec.Lost > 0 {
		return fmt.Sprintf("%s LOST %d audit records: %s", quoteIfNeeded(rec.Time), rec.Lost, printable(rec.Reason))
	}
	if rec.Notice != "" {
		return fmt.Sprintf("%s NOTICE %s", quoteIfNeeded(rec.Time), printable(rec.Notice))
	}
	var b strings.Builder
	b.WriteString(quoteIfNeeded(rec.Time))
	if sandbox {
		b.WriteString(" " + orDash(rec.Sandbox))
	}
	target := rec.Target
	if target == "" {
		target = rec.Path
	}
	fmt.Fprintf(&b, " %s %s %s %s %d %s", orDash(rec.Route), orDash(rec.Method), orDash(target), orDash(rec.Decision), rec.Status,
		time.Duration(rec.DurationMS*float64(time.Millisecond)).Round(time.Microsecond))
	if u := rec.Usage; u != nil {
		fmt.Fprintf(&b, " tokens: in=%d out=%d", u.Input, u.Output)
		if u.CacheRead > 0 {
			fmt.Fprintf(&b, " cache_read=%d", u.CacheRead)
		}
		if u.CacheWrite > 0 {
			fmt.Fprintf(&b, " cache_write=%d", u.CacheWrite)
		}
		if u.NotReported {
			// The counts are what the request reserved, not what it used.
			b.WriteString(" (not reported: charged as reserved)")
		}
	}
	if rec.Rule != "" {
		b.WriteString(" rule=" + quoteIfNeeded(rec.Rule))
	}
	if rec.Reason != "" {
		b.WriteString(" reason=" + quoteIfNeeded(rec.Reason))
	}
	if len(rec.Truncated) > 0 {
		b.WriteString(" truncated=" + quoteIfNeeded(strings.Join(rec.Truncated, ",")))
	}
	if rec.RefsOmitted > 0 {
		fmt.Fprintf(&b, " (+%d more refs)", rec.RefsOmitted)
	}
	return b.String()
}

// printable is the free text of the writer's own records as it is, or
// quoted if it holds a character that is not printable (quoteIfNeeded).
func printable(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r != ' ' && (r == utf8.RuneError || !unicode.IsPrint(r)) }) {
		return strconv.Quote(s)
	}
	return s
}

// orDash is s as quoteIfNeeded writes it, or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return quoteIfNeeded(s)
}

// quoteIfNeeded quotes a value, escaping what is not printable, when it
// holds a space, a character that is not printable (C0 and C1
// controls, U+2028 and U+2029, bidirectional formatting characters) or
// invalid UTF-8: so a line splits the same way whatever a sandbox put in
// it, and cannot forge another line, move a terminal's cursor or reorder
// what is shown.
func quoteIfNeeded(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool {
		return r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) {
		return strconv.Quote(s)
	}
	return s
}
