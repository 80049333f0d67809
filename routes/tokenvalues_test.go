package routes

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// canaryValue is a per-token value: a secret of the sandbox's that only
// the route's upstream may see.
const canaryValue = "mod_CANARYvalue0123456789abcdefghij"

// newValuesEnv serves a route whose requests use the per-token value
// mod_token, as a relay's header does.
func newValuesEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, func(o *testOptions) { o.Extra = []Route{valuesRoute{values: []string{"mod_token"}}} })
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), canaryValue) {
			t.Errorf("a log line holds a per-token value")
		}
	})
	return e
}

// mintWithValues mints a token with per-token values through the admin API.
func (e *env) mintWithValues(sandbox, body string) (int, string) {
	e.t.Helper()
	resp, err := http.Post(e.admin.URL+"/tokens?sandbox="+sandbox, "application/json", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A token is minted with the values a route names, and the answer names
// them without their values.
func TestTokenValuesMinted(t *testing.T) {
	e := newValuesEnv(t)
	status, body := e.mintWithValues("conv-1", `{"values": {"mod_token": "`+canaryValue+`"}}`)
	var created TokenCreated
	json.Unmarshal([]byte(body), &created)
	if status != 201 || !slices.Equal(created.Values, []string{"mod_token"}) || strings.Contains(body, canaryValue) {
		t.Fatalf("mint = %d %s", status, body)
	}
}

func TestTokenValuesRefused(t *testing.T) {
	e := newValuesEnv(t)
	for _, c := range []struct {
		ct, body string
		status   int
		msg      string
	}{
		{"application/json", `{"values": {"hub_token": "x"}}`, 400, `no relay uses a value named \"hub_token\" (the config's relays use: mod_token)`},
		{"application/json", `{"values": {"mod_token": "a\r\nX-Evil: 1"}}`, 400, "holds a control character"},
		{"application/json", `{"values": {"mod_token": ""}}`, 400, "must be 1 to 4096 bytes"},
		{"application/json", `{"values": {"mod_token": 7}}`, 400, `the body is not {\"values\"`},
		{"application/json", `{"values": {}, "extra": 1}`, 400, "no other keys"},
		{"text/plain", `{"values": {"mod_token": "x"}}`, 415, "must be JSON"},
	} {
		resp, err := http.Post(e.admin.URL+"/tokens?sandbox=conv-1", c.ct, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s = %d %s, want %d %q", c.body, resp.StatusCode, b, c.status, c.msg)
		}
	}
	// Nothing was minted by a refused request, and the list never shows a value.
	resp, _ := http.Get(e.admin.URL + "/tokens")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "conv-1") {
		t.Errorf("a refused mint left a token: %s", b)
	}
	e.mintWithValues("conv-9", `{"values": {"mod_token": "`+canaryValue+`"}}`)
	resp, _ = http.Get(e.admin.URL + "/tokens")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), canaryValue) || !strings.Contains(string(b), "conv-9") {
		t.Errorf("GET /tokens: %s", b)
	}
}
