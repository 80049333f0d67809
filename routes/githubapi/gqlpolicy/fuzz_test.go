package gqlpolicy

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// FuzzAnalyze holds that Analyze never panics and that whatever it accepts
// parses with gqlparser, and every repository(owner:, name:), node(id:),
// nodes(ids:) and mutation field of the operation run, found by a plain walk
// of gqlparser's AST, is in the result.
func FuzzAnalyze(f *testing.F) {
	f.Add(body(f, ghRepositoryInfo, map[string]any{"owner": "acme", "name": "app"}, "RepositoryInfo"))
	f.Add(body(f, ghRepositoryNetwork, nil, ""))
	f.Add(body(f, ghPullRequestForBranch, map[string]any{"owner": "acme", "repo": "app", "headRefName": "x", "states": []string{"OPEN"}}, ""))
	f.Add(body(f, ghPullRequestCreate, map[string]any{"input": map[string]any{"repositoryId": "R_1", "baseRefName": "main"}}, ""))
	f.Add(body(f, ghPullRequestMerge, map[string]any{"input": map[string]any{"pullRequestId": "PR_1"}}, ""))
	f.Add(body(f, `mutation { ...m } fragment m on Mutation { a: mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }`, nil, ""))
	f.Add(body(f, `query($id: ID!, $ids: [ID!]!) { repository(owner: "a", name: "b") { ... on Repository { node(id: $id) { id } nodes(ids: $ids) { id } } } }`, map[string]any{"id": "X", "ids": []string{"Y", "Z"}}, ""))
	f.Add(body(f, `query A { viewer { login } } query B { repository(owner: "a", name: "b") { id } }`, nil, "B"))
	f.Add([]byte(`[{"query": "{ viewer { login } }"}, {"query": "{ node(id: \"N\") { id } }"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := Analyze(b)
		if err != nil {
			return
		}
		var reqs []map[string]any
		if err := json.Unmarshal(b, &reqs); err != nil {
			var one map[string]any
			if err := json.Unmarshal(b, &one); err != nil {
				t.Fatalf("accepted a body encoding/json cannot read: %v", err)
			}
			reqs = []map[string]any{one}
		}
		if len(reqs) != len(ops) {
			t.Fatalf("%d requests, %d operations", len(reqs), len(ops))
		}
		for i, r := range reqs {
			query, _ := r["query"].(string)
			doc, err := parser.ParseQuery(&ast.Source{Input: query})
			if err != nil {
				t.Fatalf("accepted a query gqlparser refuses: %v", err)
			}
			name, _ := r["operationName"].(string)
			op := doc.Operations.ForName(name)
			if op == nil {
				t.Fatalf("accepted, but gqlparser finds no operation %q", name)
			}
			vars, _ := r["variables"].(map[string]any)
			check(t, &ops[i], doc, op, vars)
		}
	})
}

// check walks op plainly and fails t for a look-up or mutation it finds
// that got is missing.
func check(t *testing.T, got *Operation, doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any) {
	str := func(v *ast.Value) (string, bool) {
		if v == nil {
			return "", false
		}
		if v.Kind == ast.Variable {
			if s, ok := vars[v.Raw].(string); ok {
				return s, true
			}
			if d := op.VariableDefinitions.ForName(v.Raw); d != nil && d.DefaultValue != nil && vars[v.Raw] == nil {
				v = d.DefaultValue
			}
		}
		return v.Raw, v.Kind == ast.StringValue || v.Kind == ast.BlockValue
	}
	arg := func(f *ast.Field, name string) *ast.Value {
		if a := f.Arguments.ForName(name); a != nil {
			return a.Value
		}
		return nil
	}
	wantNode := func(id string) {
		if !slices.Contains(got.Nodes, id) {
			t.Errorf("node %q is looked up, not in Nodes %q", id, got.Nodes)
		}
	}
	var walk func(set ast.SelectionSet, top bool, depth int)
	walk = func(set ast.SelectionSet, top bool, depth int) {
		if depth > 2*MaxSelections {
			t.Fatal("accepted a document whose walk does not end")
		}
		for _, sel := range set {
			switch s := sel.(type) {
			case *ast.Field:
				if s.Name == "__typename" {
					continue
				}
				if top && !slices.Contains(got.Fields, s.Name) {
					t.Errorf("top-level field %s not in Fields %q", s.Name, got.Fields)
				}
				if top && op.Operation == ast.Mutation && !slices.ContainsFunc(got.Mutations, func(m Mutation) bool { return m.Name == s.Name }) {
					t.Errorf("mutation %s not in Mutations", s.Name)
				}
				switch s.Name {
				case "repository":
					owner, ok1 := str(arg(s, "owner"))
					name, ok2 := str(arg(s, "name"))
					if ok1 && ok2 && !slices.Contains(got.Repos, Repo{owner, name}) {
						t.Errorf("repository %s/%s not in Repos %v", owner, name, got.Repos)
					}
				case "node":
					if id, ok := str(arg(s, "id")); ok {
						wantNode(id)
					}
				case "nodes":
					if ids := arg(s, "ids"); ids != nil {
						if ids.Kind == ast.ListValue {
							for _, c := range ids.Children {
								if id, ok := str(c.Value); ok {
									wantNode(id)
								}
							}
						} else if list, ok := vars[ids.Raw].([]any); ok && ids.Kind == ast.Variable {
							for _, v := range list {
								if id, ok := v.(string); ok {
									wantNode(id)
								}
							}
						} else if id, ok := str(ids); ok {
							wantNode(id)
						}
					}
				}
				walk(s.SelectionSet, false, depth+1)
			case *ast.InlineFragment:
				walk(s.SelectionSet, top, depth+1)
			case *ast.FragmentSpread:
				walk(doc.Fragments.ForName(s.Name).SelectionSet, top, depth+1)
			}
		}
	}
	walk(op.SelectionSet, true, 0)
}

// FuzzDuplicateKeys holds checkDuplicateKeys (jsontext) to a plain walk of
// encoding/json's tokens: a JSON body in which that walk finds a key twice
// in one object is refused by the check, any such body by Analyze, and a
// JSON body refused for a duplicate has one.
func FuzzDuplicateKeys(f *testing.F) {
	f.Add([]byte(`{"query": "{ viewer { login } }", "query": "x"}`))
	f.Add([]byte(`{"query": "q", "\u0071uery": "x"}`))
	f.Add([]byte(`{"variables": {"i": {"a": 1, "a": 2}}, "query": "q"}`))
	f.Add([]byte(`[{"query": "a"}, {"query": "b", "variables": {"s": "\ud800", "s": 1}}]`))
	f.Add([]byte(`{"a": [{"b": 1}, {"b": 1}], "c": {}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			return // refused before the check
		}
		err := checkDuplicateKeys(b)
		dup, twice := duplicateByTokens(b)
		// A text encoding/json does not read is refused after the check
		// (readBody's decoders), whatever the check says of it.
		if twice && err == nil && json.Valid(b) {
			t.Fatalf("encoding/json's tokens hold the key %q twice in one object; the check let the body through", dup)
		}
		if _, aerr := Analyze(b); twice && aerr == nil {
			t.Fatalf("Analyze accepted a body in which encoding/json's tokens hold the key %q twice in one object", dup)
		}
		// On a text that is not JSON the two may disagree (jsontext sees a
		// second name before the text breaks off); readRequest refuses it.
		if err != nil && strings.Contains(err.Error(), "appears twice") && !twice && json.Valid(b) {
			t.Fatalf("refused for a duplicate that encoding/json's tokens do not hold: %v", err)
		}
	})
}

// duplicateByTokens is the first key an object of b holds twice, read with
// encoding/json's tokenizer, and whether there is one (none either for a
// text it cannot read).
func duplicateByTokens(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var stack []map[string]bool // each open object's keys; nil for an array
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, map[string]bool{})
				expectKey = true
				continue
			case '[':
				stack = append(stack, nil)
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey {
				if stack[len(stack)-1][t] {
					return t, true
				}
				stack[len(stack)-1][t] = true
				expectKey = false
				continue
			}
		}
		expectKey = len(stack) > 0 && stack[len(stack)-1] != nil
	}
}
