package routes

import (
	"net/http"
	"strings"
	"testing"
)

func FuzzPresentedToken(f *testing.F) {
	f.Add("Bearer cpx_x", "")
	f.Add("Basic eDp5", "cpx_y")
	f.Add("token cpx_z", "")
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
