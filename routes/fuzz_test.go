package routes

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzRequestModel: the model cproxy checks is the model the upstream will
// read. Whatever requestModel accepts is a valid JSON object whose "model"
// key (matched exactly, once) holds that string.
func FuzzRequestModel(f *testing.F) {
	f.Add([]byte(hello))
	f.Add([]byte(`{"model":"a","model":"b"}`))
	f.Add([]byte(`{"MODEL":"a"}`))
	f.Add([]byte(`{"messages":[{"model":"x"}],"model":"y"}`))
	f.Add([]byte(`{"model":"\u0063laude"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		model, err := requestModel(body)
		if err != nil {
			return
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		var want string
		if err := json.Unmarshal(top["model"], &want); err != nil || want != model {
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
