package policy

import (
	"fmt"
	"time"
)

// Question is one request's policy question in a form that can be kept
// (the JSON audit record's "question") and asked again of another policy:
// `cproxy policy replay` and `cproxy policy explain` ask it with Ask,
// which asks the same Ask* the routes ask. Route says which fields mean
// something; the others are empty.
type Question struct {
	// Route is the question's kind: "model", "git", "api", "npm",
	// "pypi", "go", "mcp" or "relay".
	Route string `json:"route"`
	// Profile is the profile the token was created with; empty: the one
	// the policy chooses for the sandbox.
	Profile string `json:"profile,omitempty"`

	// Model is the model a model request names.
	Model string `json:"model,omitempty"`

	// Repo is the repository ("owner/name") of git and api; Push says a
	// git request pushes, with Refs its ref updates (none while they
	// have not been read: the repository's push access alone).
	Repo string      `json:"repo,omitempty"`
	Push bool        `json:"push,omitempty"`
	Refs []RefUpdate `json:"refs,omitempty"`
	// Permission, Head and Base are an api request's (APIQuestion).
	Permission string `json:"permission,omitempty"`
	Head       string `json:"head,omitempty"`
	Base       string `json:"base,omitempty"`
	// GraphQL says an api request is one of GitHub's GraphQL API, whose
	// questions are API (AskGraphQL); Repo, Permission, Head and Base are
	// then empty.
	GraphQL bool          `json:"graphql,omitempty"`
	API     []APIQuestion `json:"api,omitempty"`

	// Package is an npm package, a PyPI project or a Go module, Version
	// the version asked for (empty: the packument, index page or list),
	// and Published the version's publish (upload, .info) time when it
	// was read. Search and Audit are npm's search and audit.
	Package   string     `json:"package,omitempty"`
	Version   string     `json:"version,omitempty"`
	Published *time.Time `json:"published,omitempty"`
	Search    bool       `json:"search,omitempty"`
	Audit     bool       `json:"audit,omitempty"`

	// Server, Method and Name are an MCP message's server, JSON-RPC
	// method and tool, resource or prompt; Args a tools/call's arguments
	// when they were recorded, and ArgsUnknown says a call had arguments
	// that were not (the server's args rules cannot be asked again).
	Server      string         `json:"server,omitempty"`
	Name        string         `json:"name,omitempty"`
	Args        map[string]any `json:"args,omitempty"`
	ArgsUnknown bool           `json:"args_unknown,omitempty"`

	// Relay is a relay's name; Method (also MCP's) and Path a relay
	// request's method and path under its prefix.
	Relay  string `json:"relay,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
}

// Ask asks q of the profile, as its route asks it, with release ages
// measured at now. relay is the config's relay that q names (nil: only the
// profile's relays are asked, as without a config). An error says q
// cannot be asked again: a kind this cproxy does not know, or a part that
// was not recorded.
func (pr *Profile) Ask(q Question, now time.Time, relay *Relay) (Answer, error) {
	switch q.Route {
	case "model":
		return pr.AskModel(q.Model), nil
	case "git":
		if !q.Push {
			return pr.AskFetch(q.Repo), nil
		}
		return pr.AskPush(q.Repo, q.Refs), nil
	case "api":
		if q.GraphQL {
			return pr.AskGraphQL(q.API), nil
		}
		return pr.AskAPI(APIQuestion{Repo: q.Repo, Permission: q.Permission, Head: q.Head, Base: q.Base}), nil
	case "npm":
		switch {
		case q.Search:
			return pr.AskNPMSearch(), nil
		case q.Audit:
			return pr.AskNPMAudit(), nil
		}
		return pr.AskNPM(NPMQuestion{Name: q.Package, Version: q.Version, Published: q.Published, Now: now}), nil
	case "pypi":
		return pr.AskPyPI(PyPIQuestion{Name: q.Package, Version: q.Version, Uploaded: q.Published, Now: now}), nil
	case "go":
		return pr.AskGo(GoQuestion{Module: q.Package, Version: q.Version, Published: q.Published, Now: now}), nil
	case "mcp":
		if q.ArgsUnknown {
			if ans := pr.AskMCP(MCPQuestion{Server: q.Server, Method: q.Method, Name: q.Name, Listed: true}); !ans.Allow {
				return ans, nil
			}
			if pr.MCPHasArgRules(q.Server, q.Name) {
				return Answer{}, fmt.Errorf("the call's arguments were not recorded ([mcp.%s] audit_arguments) and the server has rules on them", q.Server)
			}
		}
		return pr.AskMCP(MCPQuestion{Server: q.Server, Method: q.Method, Name: q.Name, Args: q.Args}), nil
	case "relay":
		if relay == nil {
			relay = &Relay{Name: q.Relay}
			return pr.AskRelay(RelayQuestion{Relay: relay}), nil
		}
		return pr.AskRelay(RelayQuestion{Relay: relay, Method: q.Method, Path: q.Path}), nil
	}
	return Answer{}, fmt.Errorf("a question of route %q, which this cproxy does not know", q.Route)
}
