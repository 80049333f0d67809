package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/routes/audit"
)

// The audit log (log.audit): serve's writer (audit.Writer), reopened on
// SIGHUP, and `cproxy audit`, its reader.

// auditFlushTimeout bounds how long serve, stopping, waits for the audit
// records still queued to be written.
const auditFlushTimeout = 5 * time.Second

// serveAuditLog opens log.audit for serve, before any socket: nil when it
// is not set and the audit lines go to the diagnostic log.
func serveAuditLog(cfg *config.Config, stdout io.Writer, log *slog.Logger) (*audit.Writer, error) {
	switch cfg.Log.Audit {
	case "":
		return nil, nil
	case config.AuditStdout:
		return audit.NewWriter(stdout, config.AuditStdout, log), nil
	}
	l, err := audit.OpenFile(cfg.Log.Audit, log)
	if err != nil {
		return nil, fail("cproxy must be able to create or append to the file: check the directory's owner and mode", "%s", cfg.ProblemAt("log.audit", "%v", err))
	}
	return l, nil
}

// auditSink is l as routes.Options.AuditLog: nil for no audit log.
func auditSink(l *audit.Writer) io.Writer {
	if l == nil {
		return nil
	}
	return l
}

// jsonLogWriter is the writer of serve's JSON logs (log.format = "json"):
// each line slog writes, with the characters it leaves raw that a
// line-oriented reader or a terminal could take for a line break or a
// reordering escaped (audit.EscapeLineBreakers), as the audit file's are.
type jsonLogWriter struct{ w io.Writer }

// Write writes one line (slog writes each record in one Write).
func (j jsonLogWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(audit.EscapeLineBreakers(p)); err != nil {
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
			// Not Required: urfave/cli would refuse "cproxy audit conv-42"
			// before cproxy's hint for the argument (checkArgs).
			&cli.StringFlag{Name: "sandbox", Usage: "the sandbox `ID` or pattern ('*': all)"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing records as they are written, across rotations"},
			&cli.StringFlag{Name: "file", Usage: "the audit log `PATH` (default: log.audit of --config)"},
			configFlag(),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text, or json (the records as written)"},
		},
		Action: func(c *cli.Context) error {
			if !c.IsSet("sandbox") {
				return fail("pass --sandbox ID, a pattern such as 'conv-*', or '*' for all", "no sandbox")
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
	if err := checkFormat(o.format, textOrJSON); err != nil {
		return err
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
	audit.Record
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
		p.w.Write(audit.EscapeLineBreakers(bytes.TrimRight(b, "\n")))
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
	if rec.Code != "" {
		b.WriteString(" code=" + quoteIfNeeded(rec.Code))
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
