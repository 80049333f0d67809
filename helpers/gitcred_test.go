package helpers

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestGitCredential(t *testing.T) {
	env := map[string]string{"CPROXY_URL": "http://10.20.30.4:8080", "CPROXY_TOKEN": "cpx_sandbox"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name, op, in, out string
		err               error
	}{
		{"ours", "get", "protocol=http\nhost=10.20.30.4:8080\n\n", "username=cproxy\npassword=cpx_sandbox\n", nil},
		{"ours with path, no blank line", "get", "protocol=http\nhost=10.20.30.4:8080\npath=github/acme/app.git\n", "username=cproxy\npassword=cpx_sandbox\n", nil},
		{"other host", "get", "protocol=https\nhost=github.com\n\n", "", ErrNotOurs},
		{"other port", "get", "protocol=http\nhost=10.20.30.4:9001\n\n", "", ErrNotOurs},
		{"https to our host", "get", "protocol=https\nhost=10.20.30.4:8080\n\n", "", ErrNotOurs},
		{"store is a no-op", "store", "protocol=http\nhost=10.20.30.4:8080\nusername=cproxy\npassword=x\n\n", "", nil},
		{"erase is a no-op", "erase", "protocol=http\nhost=10.20.30.4:8080\n\n", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := GitCredential(tc.op, strings.NewReader(tc.in), &out, getenv)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if out.String() != tc.out {
				t.Fatalf("out = %q, want %q", out.String(), tc.out)
			}
		})
	}
}

func TestGitCredentialWithoutEnvironment(t *testing.T) {
	var out bytes.Buffer
	err := GitCredential("get", strings.NewReader("protocol=http\nhost=127.0.0.1:8080\n\n"), &out, func(string) string { return "" })
	if !errors.Is(err, ErrNotOurs) || out.Len() != 0 {
		t.Fatalf("got %v, %q", err, out.String())
	}
}

func TestGitCredentialMainUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := GitCredentialMain(nil, strings.NewReader(""), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
		t.Fatalf("code %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	// Unknown operations are ignored silently, as gitcredentials(7) asks.
	if code := GitCredentialMain([]string{"capability"}, strings.NewReader("x=y\n"), &stdout, &stderr); code != 0 || stdout.Len()+stderr.Len() != 0 {
		t.Fatalf("code %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

func FuzzGitCredential(f *testing.F) {
	f.Add("get", "protocol=http\nhost=h:1\n\n")
	f.Add("get", "=\n\x00\r\n")
	f.Fuzz(func(t *testing.T, op, in string) {
		var out bytes.Buffer
		env := map[string]string{"CPROXY_URL": "http://h:1", "CPROXY_TOKEN": "cpx_t"}
		err := GitCredential(op, strings.NewReader(in), &out, func(k string) string { return env[k] })
		if err != nil && out.Len() > 0 {
			t.Fatalf("wrote %q and failed: %v", out.String(), err)
		}
		if out.Len() > 0 && !strings.HasSuffix(out.String(), "password=cpx_t\n") {
			t.Fatalf("unexpected output %q", out.String())
		}
	})
}
