package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/audit"
)

// replayFormats are the formats of cproxy policy replay.
var replayFormats = []string{"text", "json", "github"}

// replayFailOn are what --fail-on takes.
var replayFailOn = []string{"newly-refused", "newly-allowed", "any"}

// replayExamples is how many requests a change group shows.
const replayExamples = 3

func policyReplayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "ask the requests of JSON audit logs again under a new policy and report what it would change",
		ArgsUsage: "NEW.toml",
		Description: `Every request of the audit logs that the policy decided (each JSON record with a "question") is
asked again under NEW.toml, with the same decision code the routes use, and compared with the answer
it got then (or, with --old, with OLD.toml's answer to it). What changes is reported grouped by the
sandbox's profile, the route and the rule that decides it now, with counts and a few examples each.
--audit takes the files [log] audit writes, rotated and gzip-compressed ones too; give it once per
file. --fail-on newly-refused makes the command a CI gate: exit 1 when any request would be refused
that was allowed.

Examples:

   cproxy policy replay --audit audit.jsonl --audit audit.jsonl.1.gz policy.new.toml
   cproxy policy replay --audit audit.jsonl --old policy.toml --fail-on newly-refused policy.new.toml
   cproxy policy replay --audit audit.jsonl --format github policy.new.toml`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "audit", Usage: "a JSON audit log (plain or gzip); repeat for more", Required: true},
			&cli.StringFlag{Name: "old", Usage: "the policy in force when the logs were written (default: the answers recorded)"},
			&cli.StringFlag{Name: "config", Usage: "cproxy's config, for the relays' methods and paths"},
			&cli.StringFlag{Name: "fail-on", Usage: "exit 1 on newly-refused, newly-allowed or any change"},
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "text, json, or github (GitHub Actions annotations on the new policy's lines)"},
		},
		Action: func(c *cli.Context) error {
			o := replayOptions{audits: c.StringSlice("audit"), old: c.String("old"), config: c.String("config"),
				failOn: c.String("fail-on"), format: c.String("format")}
			if c.NArg() != 1 {
				return fail("cproxy policy replay --audit audit.jsonl policy.new.toml", "give one new policy file")
			}
			o.new = c.Args().First()
			return runReplay(o, c.App.Writer)
		},
	}
}

type replayOptions struct {
	audits           []string
	new, old, config string
	failOn, format   string
}

// replayed is one side of a request asked again: its answer, by which
// rule of which profile.
type replayed struct {
	allow   bool
	rule    string
	profile string
}

// change is a group of requests whose answer changes the same way.
type change struct {
	Profile  string          `json:"profile"`
	Route    string          `json:"route"`
	Rule     string          `json:"rule"`
	At       string          `json:"at,omitempty"`
	Count    int             `json:"count"`
	Examples []changeExample `json:"examples"`
	line     int
	col      int
}

type changeExample struct {
	Time    string `json:"time"`
	Sandbox string `json:"sandbox"`
	Target  string `json:"target,omitempty"`
	Was     string `json:"was"` // the rule that decided before
}

// unreplayable counts the requests that could not be asked again, by why.
type unreplayable struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

type replayReport struct {
	Policy        string         `json:"policy"`
	Against       string         `json:"against"`
	Records       int            `json:"records"`
	Replayed      int            `json:"replayed"`
	Unchanged     int            `json:"unchanged"`
	NewlyRefused  []*change      `json:"newly_refused"`
	NewlyAllowed  []*change      `json:"newly_allowed"`
	NotReplayable []unreplayable `json:"not_replayable"`
	// NoQuestion counts records the policy did not decide (no token, a
	// malformed request) or whose question was not recorded.
	NoQuestion int `json:"no_question"`
}

func runReplay(o replayOptions, w io.Writer) error {
	if err := checkFormat(o.format, replayFormats); err != nil {
		return err
	}
	if o.failOn != "" && !slices.Contains(replayFailOn, o.failOn) {
		return fail("use --fail-on newly-refused, newly-allowed or any", "unknown --fail-on %q", o.failOn)
	}
	next, err := policy.LoadPolicy(o.new)
	if err != nil {
		return configError(err)
	}
	var prev *policy.Policy
	if o.old != "" {
		if prev, err = policy.LoadPolicy(o.old); err != nil {
			return configError(err)
		}
	}
	var relays map[string]*config.Relay
	if o.config != "" {
		cfg, err := loadConfig(o.config)
		if err != nil {
			return err
		}
		relays = cfg.Relays
	}
	rep := replayReport{Policy: o.new, Against: "the answers recorded", NewlyRefused: []*change{}, NewlyAllowed: []*change{}, NotReplayable: []unreplayable{}}
	if prev != nil {
		rep.Against = o.old
	}
	groups := map[[4]string]*change{}
	why := map[string]int{}
	for _, file := range o.audits {
		err := readAuditRecords(file, func(rec audit.Record) {
			rep.Records++
			if len(rec.Question) == 0 {
				rep.NoQuestion++
				return
			}
			var q policy.Question
			if err := json.Unmarshal(rec.Question, &q); err != nil {
				why["the record's question cannot be read"]++
				return
			}
			at, err := time.Parse(audit.TimeFormat, rec.Time)
			if err != nil {
				why["the record's time cannot be read"]++
				return
			}
			var relay *policy.Relay
			if r := relays[q.Relay]; r != nil {
				relay = &r.Relay
			}
			now, err := askAgain(next, rec.Sandbox, q, at, relay)
			if err != nil {
				why[err.Error()]++
				return
			}
			then := replayed{allow: rec.Answer == audit.Allow, rule: rec.Rule, profile: rec.Profile}
			if prev != nil {
				if then, err = askAgain(prev, rec.Sandbox, q, at, relay); err != nil {
					why[err.Error()]++
					return
				}
			}
			rep.Replayed++
			if then.allow == now.allow {
				rep.Unchanged++
				return
			}
			kind := "refused"
			if now.allow {
				kind = "allowed"
			}
			k := [4]string{kind, now.profile, q.Route, now.rule}
			g := groups[k]
			if g == nil {
				g = &change{Profile: now.profile, Route: q.Route, Rule: now.rule}
				g.line, g.col = next.RuleAt(now.rule)
				if g.line > 0 {
					g.At = fmt.Sprintf("%s:%d:%d", o.new, g.line, g.col)
				}
				groups[k] = g
				if now.allow {
					rep.NewlyAllowed = append(rep.NewlyAllowed, g)
				} else {
					rep.NewlyRefused = append(rep.NewlyRefused, g)
				}
			}
			g.Count++
			if len(g.Examples) < replayExamples {
				g.Examples = append(g.Examples, changeExample{Time: rec.Time, Sandbox: rec.Sandbox, Target: rec.Target, Was: then.rule})
			}
		})
		if err != nil {
			return err
		}
	}
	for _, reason := range slices.Sorted(maps.Keys(why)) {
		rep.NotReplayable = append(rep.NotReplayable, unreplayable{Reason: reason, Count: why[reason]})
	}
	for _, list := range [][]*change{rep.NewlyRefused, rep.NewlyAllowed} {
		slices.SortStableFunc(list, func(a, b *change) int { return b.Count - a.Count })
	}
	switch o.format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	case "github":
		rep.printGitHub(w, o.new)
	default:
		rep.printText(w)
	}
	refused, allowed := len(rep.NewlyRefused) > 0, len(rep.NewlyAllowed) > 0
	if o.failOn == "newly-refused" && refused || o.failOn == "newly-allowed" && allowed || o.failOn == "any" && (refused || allowed) {
		return exitCode(1)
	}
	return nil
}

// askAgain asks q of pol for sandbox, at the time of its request.
func askAgain(pol *policy.Policy, sandbox string, q policy.Question, at time.Time, relay *policy.Relay) (replayed, error) {
	choice, err := pol.ChooseProfile(sandbox, q.Profile)
	if err != nil {
		return replayed{rule: "no profile"}, nil
	}
	ans, err := choice.Profile.Ask(q, at, relay)
	if err != nil {
		return replayed{}, err
	}
	return replayed{allow: ans.Allow, rule: ans.Decided().Rule, profile: choice.Profile.Name}, nil
}

// readAuditRecords calls each with every record of the JSON audit log at
// path, gzip-compressed or not. A line that is not a record stops it with
// an error naming the line.
func readAuditRecords(path string, each func(audit.Record)) error {
	f, err := os.Open(path)
	if err != nil {
		return fail("give the files [log] audit writes", "%v", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fail("give the files [log] audit writes", "%s: %v", path, err)
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var rec audit.Record
		if err := json.Unmarshal(line, &rec); err != nil || rec.Route == "" {
			return fail("give the JSON files [log] audit writes (not serve's log)", "%s:%d: not a JSON audit record", path, n)
		}
		each(rec)
	}
	if err := sc.Err(); err != nil {
		return fail("give the files [log] audit writes", "%s: %v", path, err)
	}
	return nil
}

func (r replayReport) printText(w io.Writer) {
	fmt.Fprintf(w, "replayed %d of %d requests against %s (before: %s); %d unchanged\n", r.Replayed, r.Records, r.Policy, r.Against, r.Unchanged)
	for _, part := range []struct {
		name string
		list []*change
	}{{"newly refused", r.NewlyRefused}, {"newly allowed", r.NewlyAllowed}} {
		total := 0
		for _, g := range part.list {
			total += g.Count
		}
		fmt.Fprintf(w, "%s: %d\n", part.name, total)
		for _, g := range part.list {
			at := ""
			if g.At != "" {
				at = " (" + g.At + ")"
			}
			fmt.Fprintf(w, "  %d  profile %s, route %s, by %s%s\n", g.Count, g.Profile, g.Route, g.Rule, at)
			for _, e := range g.Examples {
				fmt.Fprintf(w, "      %s %s %s (was %s)\n", e.Time, e.Sandbox, e.Target, e.Was)
			}
		}
	}
	for _, u := range r.NotReplayable {
		fmt.Fprintf(w, "not replayed: %d: %s\n", u.Count, u.Reason)
	}
	if r.NoQuestion > 0 {
		fmt.Fprintf(w, "not decided by the policy (no token, malformed, or no question recorded): %d\n", r.NoQuestion)
	}
}

// printGitHub prints each change as a GitHub Actions annotation on the
// new policy's line of the rule that decides it: an error for requests
// newly refused, a warning for requests newly allowed.
func (r replayReport) printGitHub(w io.Writer, file string) {
	for _, part := range []struct {
		kind, words string
		list        []*change
	}{{"error", "newly refused", r.NewlyRefused}, {"warning", "newly allowed", r.NewlyAllowed}} {
		for _, g := range part.list {
			var ex []string
			for _, e := range g.Examples {
				ex = append(ex, strings.TrimSpace(e.Sandbox+" "+e.Target))
			}
			msg := fmt.Sprintf("%d requests %s (profile %s, route %s) by %s; e.g. %s", g.Count, part.words, g.Profile, g.Route, g.Rule, strings.Join(ex, "; "))
			fmt.Fprintln(w, githubCommand(part.kind, policy.Problem{File: file, Line: g.line, Col: g.col, Message: msg}))
		}
	}
	fmt.Fprintf(w, "replayed %d of %d requests: %d unchanged\n", r.Replayed, r.Records, r.Unchanged)
}
