package routes

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzRequestModel: the model cproxy checks is the model the upstream will
// read. On valid JSON, requestModel accepts exactly the objects with one
// string "model" key (matched exactly) and returns that string; invalid JSON
// it lets through is refused by the upstream whole, so it never matters.
func FuzzRequestModel(f *testing.F) {
	f.Add([]byte(hello))
	f.Add([]byte(`{"model":"a","model":"b"}`))
	f.Add([]byte(`{"MODEL":"a"}`))
	f.Add([]byte(`{"messages":[{"model":"x"}],"model":"y"}`))
	f.Add([]byte(`{"model":"\u0063laude"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		model, err := requestModel(body)
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
		wantErr := json.Unmarshal(top["model"], &want) != nil || want == "" || modelKeys(body) != 1
		if wantErr != (err != nil) {
			t.Fatalf("%q: got %q, %v; upstream reads %q", body, model, err, want)
		}
		if err == nil && model != want {
			t.Fatalf("checked model %q, upstream would read %q", model, want)
		}
	})
}

func FuzzPresentedToken(f *testing.F) {
	f.Add("Bearer cpx_x", "")
	f.Add("Basic eDp5", "cpx_y")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, authz, key string) {
		r, _ := http.NewRequest("GET", "/", nil)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		if key != "" {
			r.Header.Set("X-Api-Key", key)
		}
		tok, err := presentedToken(r)
		if err == nil && tok == "" {
			t.Fatal("accepted an empty token")
		}
		if err != nil && strings.Contains(err.Error(), "cpx_") {
			t.Fatalf("error echoes the token: %v", err)
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

// modelKeys counts the top-level keys that decode to "model", the slow way.
func modelKeys(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.Token()
	n := 0
	for dec.More() {
		k, _ := dec.Token()
		if k == "model" {
			n++
		}
		var v json.RawMessage
		dec.Decode(&v)
	}
	return n
}
