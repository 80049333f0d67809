package gqlpolicy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// The bounds of a request. A document past one is refused, not cut.
const (
	// MaxBodyBytes bounds the whole body, a batch included.
	MaxBodyBytes = 64 << 10
	// MaxBatch bounds how many requests one array body holds.
	MaxBatch = 10
	// MaxDepth bounds how deeply fields nest in an operation, counted
	// through fragments as GitHub's answer would nest.
	MaxDepth = 20
	// MaxSelections bounds the fields (aliases included), fragment spreads
	// and inline fragments the walk of one operation visits; a fragment
	// spread twice counts twice, so fragments cannot multiply work.
	MaxSelections = 500
)

// The kinds of refusal. Every error Analyze returns wraps one of them.
var (
	// ErrInvalid is a body that is not a GraphQL request this package can
	// read: not JSON, a query that does not parse, a variable missing or
	// of the wrong type, a fragment unknown or in a cycle.
	ErrInvalid = errors.New("invalid graphql request")
	// ErrTooLarge is a body past one of the bounds above.
	ErrTooLarge = errors.New("graphql request too large")
	// ErrRefused is a request understood and refused whatever the policy:
	// a subscription, or a look-up whose target cannot be told.
	ErrRefused = errors.New("graphql request refused")
)

// The kinds of Operation: subscriptions are refused.
const (
	KindQuery    = "query"
	KindMutation = "mutation"
)

// Operation is what one request of the body reaches: the operation GitHub
// would run, seen through aliases, fragments and variables.
type Operation struct {
	// Kind is KindQuery or KindMutation.
	Kind string
	// Name is the operation's name as sent, "" for an anonymous one. It is
	// for logs: nothing should be decided on it.
	Name string
	// Repos are the repositories named by repository(owner:, name:)
	// fields at any depth, each once, in the order first met.
	Repos []Repo
	// Nodes are the node IDs looked up by node(id:) and nodes(ids:) at any
	// depth, those another field's arguments name (an argument ending in
	// Id or Ids, as isRequired(pullRequestId:)), and those a mutation's
	// input names, each once.
	Nodes []string
	// Fields are the names of the operation's top-level fields (for a
	// mutation, the mutations), each once: never an alias.
	Fields []string
	// Paths are the names of every field read, each once, as the dotted
	// path of field names from the top ("repository.pullRequests.nodes"):
	// the route's allowlist of what may be read.
	Paths []string
	// Mutations are a mutation's top-level fields in order, one for each
	// field even when a name repeats; nil for a query.
	Mutations []Mutation
}

// Repo is a repository as a repository(owner:, name:) field names it,
// letters' case as sent.
type Repo struct {
	Owner, Name string
}

func (r Repo) String() string { return r.Owner + "/" + r.Name }

// Mutation is one mutation field and the input it is given.
type Mutation struct {
	// Name is the mutation's field name (createPullRequest), never an alias.
	Name string
	// Input is the input argument, variables replaced by their values:
	// strings, bools, nil, json.Number, []any and map[string]any.
	Input map[string]any
}

// Analyze reads a body sent to GitHub's GraphQL endpoint and returns what
// each of its requests reaches, one Operation for a request object and one
// per element, in order, for an array. Any request it cannot decide refuses
// the whole body.
func Analyze(body []byte) ([]Operation, error) {
	reqs, err := readBody(body)
	if err != nil {
		return nil, err
	}
	ops := make([]Operation, 0, len(reqs))
	for i, r := range reqs {
		op, err := analyzeRequest(r)
		if err != nil {
			if len(reqs) > 1 {
				err = fmt.Errorf("request %d of %d: %w", i+1, len(reqs), err)
			}
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func analyzeRequest(r request) (Operation, error) {
	doc, gqlErr := parser.ParseQuery(&ast.Source{Input: r.Query})
	if gqlErr != nil {
		return Operation{}, fmt.Errorf("%w: the query does not parse: %s", ErrInvalid, clip(gqlErr.Error()))
	}
	op, err := chooseOperation(doc, r.OperationName)
	if err != nil {
		return Operation{}, err
	}
	if op.Operation != ast.Query && op.Operation != ast.Mutation {
		return Operation{}, fmt.Errorf("%w: a %s is not served: send a query or a mutation", ErrRefused, op.Operation)
	}
	frags := make(map[string]*ast.FragmentDefinition, len(doc.Fragments))
	for _, f := range doc.Fragments {
		if frags[f.Name] != nil {
			return Operation{}, fmt.Errorf("%w: the fragment %s is defined twice", ErrInvalid, clip(f.Name))
		}
		frags[f.Name] = f
	}
	vars, err := checkVariables(op, r.Variables)
	if err != nil {
		return Operation{}, err
	}
	w := &walker{
		frags:    frags,
		vars:     vars,
		mutation: op.Operation == ast.Mutation,
		onStack:  map[string]bool{},
		seen:     map[string]bool{},
		repos:    map[Repo]bool{},
	}
	w.out.Kind = string(op.Operation)
	w.out.Name = op.Name
	if err := w.directives(op.Directives); err != nil {
		return Operation{}, err
	}
	if err := w.selections(op.SelectionSet, nil); err != nil {
		return Operation{}, err
	}
	return w.out, nil
}

// chooseOperation is the operation GitHub would run: the only one, or the
// one operationName names. Several and no name, or a name that matches
// none, is refused rather than guessed.
func chooseOperation(doc *ast.QueryDocument, name string) (*ast.OperationDefinition, error) {
	ops := doc.Operations
	if len(ops) == 0 {
		return nil, fmt.Errorf("%w: the document has no operation", ErrInvalid)
	}
	names := map[string]bool{}
	for _, op := range ops {
		if op.Name == "" && len(ops) > 1 {
			return nil, fmt.Errorf("%w: the document has an anonymous operation among others: name each, or send one", ErrInvalid)
		}
		if names[op.Name] {
			return nil, fmt.Errorf("%w: the operation %s is defined twice", ErrInvalid, clip(op.Name))
		}
		names[op.Name] = true
	}
	if name == "" {
		if len(ops) > 1 {
			return nil, fmt.Errorf("%w: the document has %d operations and no operationName: say which to run", ErrInvalid, len(ops))
		}
		return ops[0], nil
	}
	if op := ops.ForName(name); op != nil && op.Name == name {
		return op, nil
	}
	return nil, fmt.Errorf("%w: no operation is named %s", ErrInvalid, clip(name))
}

// walker walks one operation's selections, fragments spread in place.
type walker struct {
	frags    map[string]*ast.FragmentDefinition
	vars     map[string]any
	mutation bool
	onStack  map[string]bool // the fragments being walked, for cycles
	seen     map[string]bool // what out already holds: "node:", "field:", "path:"
	repos    map[Repo]bool
	count    int
	out      Operation
}

// selections walks set, the selections under the field path path (nil at
// the top of the operation).
func (w *walker) selections(set ast.SelectionSet, path []string) error {
	for _, sel := range set {
		w.count++
		if w.count > MaxSelections {
			return fmt.Errorf("%w: the operation selects more than %d fields and fragments: split it", ErrTooLarge, MaxSelections)
		}
		var err error
		switch s := sel.(type) {
		case *ast.Field:
			err = w.field(s, path)
		case *ast.InlineFragment:
			// Type conditions and @include/@skip are not evaluated: every
			// selection counts as if GitHub ran it.
			if err = w.directives(s.Directives); err == nil {
				err = w.selections(s.SelectionSet, path)
			}
		case *ast.FragmentSpread:
			err = w.spread(s, path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) spread(s *ast.FragmentSpread, path []string) error {
	f := w.frags[s.Name]
	if f == nil {
		return fmt.Errorf("%w: the fragment %s is spread but not defined", ErrInvalid, clip(s.Name))
	}
	if w.onStack[s.Name] {
		return fmt.Errorf("%w: the fragment %s spreads itself", ErrInvalid, clip(s.Name))
	}
	if err := w.directives(s.Directives); err != nil {
		return err
	}
	if err := w.directives(f.Directives); err != nil {
		return err
	}
	w.onStack[s.Name] = true
	defer delete(w.onStack, s.Name)
	return w.selections(f.SelectionSet, path)
}

func (w *walker) field(f *ast.Field, parent []string) error {
	if f.Name == "__typename" {
		return nil
	}
	path := append(slices.Clip(parent), f.Name)
	if len(path) > MaxDepth {
		return fmt.Errorf("%w: fields nest deeper than %d: send a shallower query", ErrTooLarge, MaxDepth)
	}
	if err := w.directives(f.Directives); err != nil {
		return err
	}
	args := make(map[string]any, len(f.Arguments))
	for _, a := range f.Arguments {
		if _, dup := args[a.Name]; dup {
			return fmt.Errorf("%w: the argument %s appears twice on %s", ErrInvalid, clip(a.Name), clip(f.Name))
		}
		v, err := literal(a.Value, w.vars)
		if err != nil {
			return err
		}
		args[a.Name] = v
	}
	if len(parent) == 0 {
		w.add("field:", f.Name, &w.out.Fields)
		if w.mutation {
			if err := w.mutationField(f, args); err != nil {
				return err
			}
		}
	}
	w.add("path:", strings.Join(path, "."), &w.out.Paths)
	if err := w.lookup(f, args); err != nil {
		return err
	}
	return w.selections(f.SelectionSet, path)
}

// lookup records what a field looks up by its arguments: a repository by
// owner and name, nodes by ID. The same names without arguments are
// GitHub's fields of an object (a pull request's repository, a
// connection's nodes, an edge's node), which look nothing up.
func (w *walker) lookup(f *ast.Field, args map[string]any) error {
	if len(args) == 0 {
		return nil
	}
	switch f.Name {
	default:
		// An argument named for a node ID (isRequired(pullRequestId:))
		// reads that node too: it is decided as a look-up is.
		for _, k := range sortedKeys(args) {
			if err := w.argIDs(f, k, args[k]); err != nil {
				return err
			}
		}
	case "repository":
		owner, okOwner := args["owner"].(string)
		name, okName := args["name"].(string)
		if !okOwner || !okName {
			return fmt.Errorf("%w: repository is looked up without a string owner and name: name both", ErrRefused)
		}
		if r := (Repo{Owner: owner, Name: name}); !w.repos[r] {
			w.repos[r] = true
			w.out.Repos = append(w.out.Repos, r)
		}
	case "node":
		id, ok := args["id"].(string)
		if !ok {
			return fmt.Errorf("%w: node is looked up without a string id", ErrRefused)
		}
		w.add("node:", id, &w.out.Nodes)
	case "nodes":
		ids, ok := args["ids"].([]any)
		if s, one := args["ids"].(string); one {
			ids, ok = []any{s}, true
		}
		if !ok {
			return fmt.Errorf("%w: nodes is looked up without a list of string ids", ErrRefused)
		}
		for _, v := range ids {
			id, ok := v.(string)
			if !ok {
				return fmt.Errorf("%w: nodes is looked up with an id that is not a string", ErrRefused)
			}
			w.add("node:", id, &w.out.Nodes)
		}
	}
	return nil
}

// argIDs adds to Nodes the node IDs the argument k of f names, when its
// name ends in Id or Ids.
func (w *walker) argIDs(f *ast.Field, k string, v any) error {
	switch {
	case strings.HasSuffix(k, "Id"):
		id, ok := v.(string)
		if !ok && v != nil {
			return fmt.Errorf("%w: the argument %s of %s is not a string", ErrRefused, clip(k), clip(f.Name))
		}
		if ok {
			w.add("node:", id, &w.out.Nodes)
		}
	case strings.HasSuffix(k, "Ids"):
		if s, one := v.(string); one {
			v = []any{s}
		}
		list, _ := v.([]any)
		if list == nil && v != nil {
			return fmt.Errorf("%w: the argument %s of %s is not a list of strings", ErrRefused, clip(k), clip(f.Name))
		}
		for _, e := range list {
			id, ok := e.(string)
			if !ok {
				return fmt.Errorf("%w: the argument %s of %s holds a value that is not a string", ErrRefused, clip(k), clip(f.Name))
			}
			w.add("node:", id, &w.out.Nodes)
		}
	}
	return nil
}

// mutationField records a top-level mutation: its one argument, input,
// must be an object; the node IDs it names (keys ending in Id or Ids, at any
// depth) are added to Nodes.
func (w *walker) mutationField(f *ast.Field, args map[string]any) error {
	input, ok := args["input"].(map[string]any)
	if !ok || len(args) != 1 {
		return fmt.Errorf("%w: the mutation %s takes one argument, an input object", ErrRefused, clip(f.Name))
	}
	w.out.Mutations = append(w.out.Mutations, Mutation{Name: f.Name, Input: input})
	return w.inputIDs(input)
}

func (w *walker) inputIDs(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			val := x[k]
			switch {
			case k == "clientMutationId":
				// The client's own label, echoed back: not a node.
			case strings.HasSuffix(k, "Id"):
				if id, ok := val.(string); ok {
					w.add("node:", id, &w.out.Nodes)
				} else if val != nil {
					return fmt.Errorf("%w: the input's %s is not a string", ErrRefused, clip(k))
				}
			case strings.HasSuffix(k, "Ids"):
				if s, one := val.(string); one {
					val = []any{s}
				}
				list, _ := val.([]any)
				if list == nil && val != nil {
					return fmt.Errorf("%w: the input's %s is not a list of strings", ErrRefused, clip(k))
				}
				for _, e := range list {
					id, ok := e.(string)
					if !ok {
						return fmt.Errorf("%w: the input's %s holds a value that is not a string", ErrRefused, clip(k))
					}
					w.add("node:", id, &w.out.Nodes)
				}
			default:
				if err := w.inputIDs(val); err != nil {
					return err
				}
			}
		}
	case []any:
		for _, e := range x {
			if err := w.inputIDs(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// directives checks the variables a directive names; its effect is not
// evaluated.
func (w *walker) directives(ds ast.DirectiveList) error {
	for _, d := range ds {
		for _, a := range d.Arguments {
			if _, err := literal(a.Value, w.vars); err != nil {
				return err
			}
		}
	}
	return nil
}

// add appends s to list once: kind tells the lists apart in seen.
func (w *walker) add(kind, s string, list *[]string) {
	if !w.seen[kind+s] {
		w.seen[kind+s] = true
		*list = append(*list, s)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// clip bounds a client's text in an error to a readable length.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
