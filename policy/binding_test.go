package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestBindingProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"bad sources", `[profile.web]
models = ["*"]
sources = ["10.20.0.0/33", "10.20.30.5/16", "host.internal", "10.30.1.7", "10.30.1.7/32", "fe80::1%eth0"]
`, []string{
			`policy.toml:3:12: profile.web.sources: "10.20.0.0/33" is not an IP address or CIDR prefix (e.g. "10.20.30.5", "10.20.0.0/16")`,
			`policy.toml:3:28: profile.web.sources: "10.20.30.5/16" has bits set past its length: write "10.20.0.0/16"`,
			`policy.toml:3:45: profile.web.sources: "host.internal" is not an IP address or CIDR prefix (e.g. "10.20.30.5", "10.20.0.0/16")`,
			`policy.toml:3:75: profile.web.sources: "10.30.1.7/32" is the same source as "10.30.1.7" (remove one)`,
			`policy.toml:3:91: profile.web.sources: "fe80::1%eth0" is not an IP address or CIDR prefix (e.g. "10.20.30.5", "10.20.0.0/16")`,
		}},
		{"sources not a list", `[profile.web]
sources = "10.0.0.0/8"
`, []string{`policy.toml:2:11: profile.web.sources: must be an array of strings, not a string (write ["10.0.0.0/8"])`}},
		{"unknown binding", `[profile.web]
bind = "vsock"
`, []string{`policy.toml:2:8: profile.web.bind: "vsock" is not a binding (use "socket", or leave bind out for any listener)`}},
		{"empty binding", `[profile.web]
bind = ""
`, []string{`policy.toml:2:8: profile.web.bind: "" is not a binding (use "socket", or leave bind out for any listener)`}},
		{"socket and sources", `[profile.web]
sources = ["10.0.0.0/8"]
bind = "socket"
`, []string{`policy.toml:3:1: profile.web.bind: bind = "socket" cannot be combined with sources: a Unix socket has no peer address (the socket is the sandbox's identity; drop sources)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, probs := loadPolicy("policy.toml", []byte(tt.src))
			var got []string
			for _, pr := range probs {
				got = append(got, pr.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if p != nil {
				t.Errorf("a policy with problems came back")
			}
		})
	}
}

func TestSources(t *testing.T) {
	p := mustPolicy(t, `[profile.lan]
sources = ["10.20.0.0/16", "10.30.1.7", "fd00:cafe::/32"]

[profile.any]
models = ["*"]

[profile.sock]
bind = "socket"
`)
	lan, anyp, sock := p.Profiles["lan"], p.Profiles["any"], p.Profiles["sock"]
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"10.20.0.1", true},
		{"10.20.255.255", true},
		{"10.21.0.1", false},
		{"10.30.1.7", true},
		{"10.30.1.8", false},
		{"::ffff:10.20.3.4", true}, // a dual-stack listener's view of an IPv4 peer
		{"fd00:cafe::1", true},
		{"fd00:cafd::1", false},
		{"127.0.0.1", false},
	} {
		if got := lan.SourceAllowed(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("lan.SourceAllowed(%s) = %v, want %v", tt.addr, got, tt.want)
		}
		if !anyp.SourceAllowed(netip.MustParseAddr(tt.addr)) {
			t.Errorf("a profile without sources refused %s", tt.addr)
		}
	}
	if lan.SourceAllowed(netip.Addr{}) {
		t.Error("a profile with sources accepted a peer without an address (a Unix socket)")
	}
	if !anyp.SourceAllowed(netip.Addr{}) || anyp.HasSources() || !lan.HasSources() {
		t.Error("HasSources or SourceAllowed without sources is wrong")
	}
	if sock.Bind != BindSocket {
		t.Errorf("sock.Bind = %q", sock.Bind)
	}
	for _, tt := range []struct {
		src  string
		want bool
	}{
		{"10.20.30.5", true},
		{"10.20.30.0/24", true},
		{"10.20.0.0/16", true},
		{"10.0.0.0/8", false}, // wider than the profile allows
		{"10.30.1.7", true},
		{"10.30.1.0/24", false},
		{"192.168.1.1", false},
	} {
		if got := lan.CoversSource(mustSource(t, tt.src)); got != tt.want {
			t.Errorf("lan.CoversSource(%s) = %v, want %v", tt.src, got, tt.want)
		}
		if !anyp.CoversSource(mustSource(t, tt.src)) {
			t.Errorf("a profile without sources does not cover %s", tt.src)
		}
	}
}

func mustSource(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := ParseSource(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseSource(t *testing.T) {
	for in, want := range map[string]string{
		"10.20.30.5":          "10.20.30.5/32",
		"10.20.0.0/16":        "10.20.0.0/16",
		"::ffff:10.1.2.3":     "10.1.2.3/32",
		"fd00::7":             "fd00::7/128",
		"0.0.0.0/0":           "0.0.0.0/0",
		"10.20.30.5/16":       "",
		"::ffff:10.0.0.0/104": "",
		"":                    "",
		"10.20.30.5:80":       "",
	} {
		p, err := ParseSource(in)
		switch {
		case want == "" && err == nil:
			t.Errorf("ParseSource(%q) = %v, want an error", in, p)
		case want != "" && (err != nil || p.String() != want):
			t.Errorf("ParseSource(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
}
