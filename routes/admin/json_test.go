package admin

import (
	"encoding/json"
	"testing"
)

// FuzzDuplicateKey holds foldKey to encoding/json: whenever json.Unmarshal
// would fill one field from two keys of a body, DuplicateKey reports it.
func FuzzDuplicateKey(f *testing.F) {
	for _, k := range []string{"requests", "REQUESTS", "requeſts", "window", "\u212aey", "values", "other"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		name, err := json.Marshal(key)
		if err != nil {
			return
		}
		body := []byte(`{"requests":1,` + string(name) + `:2}`)
		var v struct {
			Requests int `json:"requests"`
		}
		if json.Unmarshal(body, &v) != nil {
			return
		}
		dup, err := DuplicateKey(body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if v.Requests == 2 && dup == "" {
			t.Fatalf("%s: json.Unmarshal took the second key, DuplicateKey saw no duplicate", body)
		}
	})
}
