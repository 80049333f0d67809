package main

import (
	"strings"
	"testing"
	"unicode"

	"github.com/cproxy/cproxy/routes/audit"
)

// TestFormatAuditRecordEscapes: whatever a sandbox put in a record's
// strings, cproxy audit prints one line with no character that breaks it
// or reorders it, and a value with a space comes out quoted, so the fields
// split as they should.
func TestFormatAuditRecordEscapes(t *testing.T) {
	for _, r := range []rune{'\n', '\r', '\x1b', 0x7f, 0x80, 0x85, 0x9b, 0x9f, 0x2028, 0x2029, 0x061c, 0x200e, 0x200f,
		0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069, 0xfeff} {
		s := "a" + string(r) + "b"
		rec := auditLine{Record: audit.Record{Time: s, Sandbox: s, Route: s, Method: s, Target: s, Decision: s, Rule: s, Reason: s, Truncated: []string{s}}}
		for _, line := range []string{formatAuditRecord(rec, true), formatAuditRecord(auditLine{Record: audit.Record{Time: "t", Reason: s}, Lost: 1}, false),
			formatAuditRecord(auditLine{Record: audit.Record{Time: "t"}, Notice: s}, false)} {
			if strings.ContainsFunc(line, func(c rune) bool { return c != ' ' && !unicode.IsPrint(c) }) {
				t.Errorf("U+%04X: printed raw: %q", r, line)
			}
		}
	}
	rec := auditLine{Record: audit.Record{Time: "t", Route: "github", Method: "POST", Target: "acme/app refs/heads/main", Decision: "deny", Status: 200, RefsOmitted: 3, Truncated: []string{"target", "refs"}}}
	if got, want := formatAuditRecord(rec, false), `t github POST "acme/app refs/heads/main" deny 200 0s truncated=target,refs (+3 more refs)`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	rec = auditLine{Record: audit.Record{Time: "t", Route: "model", Method: "POST", Target: "claude-sonnet-4-5", Decision: "allow", Status: 200,
		Usage: &audit.Usage{Input: 90, Output: 16, NotReported: true}}}
	if got, want := formatAuditRecord(rec, false), `t model POST claude-sonnet-4-5 allow 200 0s tokens: in=90 out=16 (not reported: charged as reserved)`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
