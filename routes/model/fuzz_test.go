package model

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// hello is a small model request, as Claude Code sends one.
const hello = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`

// FuzzRequestModel: the model cproxy checks is the model the upstream will
// read, and the max_tokens its budget reserves is the one the upstream will
// honour. On valid JSON, requestModel accepts exactly the objects with one
// string "model" key and at most one "max_tokens" that is a non-negative
// integer, with no other casing of either key, and returns them; then a
// parser that matches keys exactly and one that ignores their case
// (encoding/json decoding into a struct) read the same. Invalid JSON it
// lets through is refused by the upstream whole, so it never matters.
func FuzzRequestModel(f *testing.F) {
	f.Add([]byte(hello))
	f.Add([]byte(`{"model":"a","model":"b"}`))
	f.Add([]byte(`{"MODEL":"a"}`))
	f.Add([]byte(`{"messages":[{"model":"x"}],"model":"y"}`))
	f.Add([]byte(`{"model":"\u0063laude"}`))
	f.Add([]byte(`{"model":"a","max_tokens":1024}`))
	f.Add([]byte(`{"model":"a","max_tokens":1e3}`))
	f.Add([]byte(`{"model":"a","max_tokens":5,"max_\u0074okens":50000}`))
	f.Add([]byte(`{"model":"a","MODEL":"b"}`))
	f.Add([]byte(`{"model":"a","max_tokens":5,"MAX_TOKENS":50000}`))
	f.Add([]byte(`{"model":"a","max_to\u212aens":50000}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		model, maxTokens, err := requestModel(body)
		if !json.Valid(body) {
			return
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil {
			if err == nil {
				t.Fatalf("accepted %q, which is not an object", body)
			}
			return
		}
		var want string
		wantErr := json.Unmarshal(top["model"], &want) != nil || want == "" || topKeys(body, "model") != 1
		var wantMax int64
		if raw, ok := top["max_tokens"]; ok {
			wantErr = wantErr || topKeys(body, "max_tokens") != 1 || json.Unmarshal(raw, &wantMax) != nil ||
				wantMax < 0 || bytes.ContainsAny(raw, ".eE")
		}
		for k := range top {
			wantErr = wantErr || k != "model" && strings.EqualFold(k, "model") || k != "max_tokens" && strings.EqualFold(k, "max_tokens")
		}
		if wantErr != (err != nil) {
			t.Fatalf("%q: got %q, %v; upstream reads %q", body, model, err, want)
		}
		if err == nil && (model != want || maxTokens != wantMax) {
			t.Fatalf("checked model %q and max_tokens %d, upstream would read %q and %d", model, maxTokens, want, wantMax)
		}
		var folded struct {
			Model     string `json:"model"`
			MaxTokens int64  `json:"max_tokens"`
		}
		if err == nil && (json.Unmarshal(body, &folded) != nil || folded.Model != model || folded.MaxTokens != maxTokens) {
			t.Fatalf("checked model %q and max_tokens %d, a parser ignoring case reads %q and %d", model, maxTokens, folded.Model, folded.MaxTokens)
		}
	})
}

func FuzzAllowQuery(f *testing.F) {
	f.Add("beta=true")
	f.Add("beta=true&beta=false")
	f.Add("limit=5&after_id=x;evil=1")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := allowQuery(raw, []string{"beta", "limit"})
		if err != nil {
			return
		}
		for _, kv := range strings.Split(q, "&") {
			if kv == "" {
				continue
			}
			k, _, _ := strings.Cut(kv, "=")
			if k != "beta" && k != "limit" {
				t.Fatalf("%q let %q through", raw, k)
			}
		}
	})
}

// topKeys counts the top-level keys that decode to name, the slow way.
func topKeys(body []byte, name string) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.Token()
	n := 0
	for dec.More() {
		k, _ := dec.Token()
		if k == name {
			n++
		}
		var v json.RawMessage
		dec.Decode(&v)
	}
	return n
}
