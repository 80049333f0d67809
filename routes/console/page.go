package console

import (
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/routes/audit"
)

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format(time.RFC3339)
	},
}

// pageData is what the console's page shows.
type pageData struct {
	CSRF      string
	User      string
	Flash     string
	Errors    []string
	Sandboxes []sandboxView
	Approvals []client.Approval
	Recent    []Row
	Policy    struct{ Path, Text string }
	Reload    *Reload
	Now       string
}

// sandboxView is one sandbox with its live tokens.
type sandboxView struct {
	ID     string
	Tokens []tokenView
}

// tokenView is one live token as the page shows it: its id, never its
// value (the admin API's list has none).
type tokenView struct {
	client.TokenInfo
	LastSeen string
	Window   string
	Bars     []bar
}

// bar is one budget's use: Used of Limit.
type bar struct {
	Name        string
	Used, Limit int64
	Over        bool
}

func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	s := c.pageSession(w, r)
	if s == nil {
		c.render(w, http.StatusOK, "login.html", nil)
		return
	}
	c.mu.Lock()
	d := pageData{CSRF: s.csrf, User: s.user, Flash: s.flash, Now: c.o.Now().UTC().Format(time.RFC3339)}
	s.flash = ""
	c.mu.Unlock()
	d.Sandboxes, d.Errors = c.sandboxes(r)
	var ap client.Approvals
	if code, msg := c.call(r.Context(), http.MethodGet, "/approvals?state=pending", &ap); code != http.StatusOK {
		d.Errors = append(d.Errors, msg)
	}
	d.Approvals = ap.Approvals
	d.Recent = c.o.Feed.Recent()
	d.Policy.Path, d.Policy.Text = c.o.Policy()
	if c.o.Reload != nil {
		if rl := c.o.Reload(); !rl.At.IsZero() {
			d.Reload = &rl
		}
	}
	c.render(w, http.StatusOK, "page.html", d)
}

// sandboxes lists the live tokens, page by page through the admin API, by
// sandbox in order of their ids, with each token's use of its budget.
func (c *Console) sandboxes(r *http.Request) ([]sandboxView, []string) {
	var out []sandboxView
	cursor, n := "", 0
	for n < maxTokensShown {
		q := url.Values{"state": {"live"}, "limit": {strconv.Itoa(min(client.MaxListLimit, maxTokensShown-n))}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page client.TokenPage
		if code, msg := c.call(r.Context(), http.MethodGet, "/tokens?"+q.Encode(), &page); code != http.StatusOK {
			return out, []string{msg}
		}
		for _, t := range page.Tokens {
			i, found := slices.BinarySearchFunc(out, t.Sandbox, func(s sandboxView, id string) int { return strings.Compare(s.ID, id) })
			if !found {
				out = slices.Insert(out, i, sandboxView{ID: t.Sandbox})
			}
			out[i].Tokens = append(out[i].Tokens, c.tokenView(t))
		}
		n += len(page.Tokens)
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	return out, nil
}

func (c *Console) tokenView(t client.TokenInfo) tokenView {
	v := tokenView{TokenInfo: t, LastSeen: c.o.Feed.LastSeen(t.ID)}
	if t.Budget == nil {
		return v
	}
	b, u := *t.Budget, client.Usage{}
	if t.Usage != nil {
		u = *t.Usage
	}
	v.Window = b.Window
	for _, x := range []bar{
		{"requests", u.Requests, b.Requests, false},
		{"input tokens", u.InputTokens, b.InputTokens, false},
		{"output tokens", u.OutputTokens, b.OutputTokens, false},
		{"cache read tokens", u.CacheReadTokens, b.CacheReadTokens, false},
		{"cache write tokens", u.CacheWriteTokens, b.CacheWriteTokens, false},
		{"MCP calls", u.MCPCalls, b.MCPCalls, false},
	} {
		if x.Limit > 0 {
			x.Over = x.Used >= x.Limit
			v.Bars = append(v.Bars, x)
		}
	}
	return v
}

// decisionClass is the CSS class of a row's decision: a request warn mode
// let pass is marked as warned.
func (r Row) Class() string {
	switch r.Decision {
	case audit.Deny, audit.Error, audit.Warn:
		return r.Decision
	}
	return "allow"
}
