package gomod

import (
	"strings"
	"testing"

	"golang.org/x/mod/module"
)

func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		path string
		want Request
	}{
		{"golang.org/x/mod/@v/list", Request{Module: "golang.org/x/mod", Kind: KindList}},
		{"golang.org/x/mod/@latest", Request{Module: "golang.org/x/mod", Kind: KindLatest}},
		{"golang.org/x/mod/@v/v0.43.0.info", Request{Module: "golang.org/x/mod", Version: "v0.43.0", Kind: KindInfo}},
		{"golang.org/x/mod/@v/v0.43.0.mod", Request{Module: "golang.org/x/mod", Version: "v0.43.0", Kind: KindMod}},
		{"golang.org/x/mod/@v/v0.43.0.zip", Request{Module: "golang.org/x/mod", Version: "v0.43.0", Kind: KindZip}},
		// Capitals arrive !-escaped (and percent-encoded, which net/http undoes).
		{"github.com/!burnt!sushi/toml/@v/v1.6.0.zip", Request{Module: "github.com/BurntSushi/toml", Version: "v1.6.0", Kind: KindZip}},
		{"example.com/lib/@v/v1.2.4-0.20261101120000-abcdefabcdef.info", Request{Module: "example.com/lib", Version: "v1.2.4-0.20261101120000-abcdefabcdef", Kind: KindInfo}},
		{"example.com/lib/@v/v1.0.0-!r!c1.mod", Request{Module: "example.com/lib", Version: "v1.0.0-RC1", Kind: KindMod}},
		{"example.com/old/@v/v2.0.0+incompatible.zip", Request{Module: "example.com/old", Version: "v2.0.0+incompatible", Kind: KindZip}},
		{"example.com/lib/v2/@v/v2.1.0.zip", Request{Module: "example.com/lib/v2", Version: "v2.1.0", Kind: KindZip}},
	} {
		got, err := ParsePath(c.path)
		if err != nil || got != c.want {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", c.path, got, err, c.want)
		}
	}
	for _, p := range []string{
		"", "golang.org/x/mod", "golang.org/x/mod/@v/", "golang.org/x/mod/@v/list.info",
		"golang.org/x/mod/@v/v0.43.0", "golang.org/x/mod/@v/v0.43.0.tar", "golang.org/x/mod/@v/v0.43.0.info/x",
		"golang.org/x/mod/@latest/x", "golang.org/x/mod/@v/latest.info", "golang.org/x/mod/@v/v1.2.info",
		"golang.org/x/mod/@v/master.zip", "golang.org/x/mod/@v/0.43.0.zip",
		// Capitals must be !-escaped; an unescaped one is another spelling.
		"github.com/BurntSushi/toml/@v/v1.6.0.zip", "example.com/lib/@v/v1.0.0-RC1.mod",
		"github.com/!!x/y/@v/list", "github.com/!/y/@v/list",
		"../etc/@v/list", "example.com/../x/@v/list", "example.com//x/@v/list", "/example.com/x/@v/list",
		"example.com/x/@v/v2.0.0.zip",      // v2 without /v2 and without +incompatible
		"example.com/x/v2/@v/v1.0.0.zip",   // a /v2 module at v1
		"example.com/x/@v/v1.0.0+meta.zip", // build metadata is not a module version
		"example.com/x/@v/..%2f.zip", "example.com/x/@v/v1.0.0%2F.zip", "example.com/x/@v/v1.0.0/.zip",
		"sumdb/sum.golang.org/supported",
		"example.com/" + strings.Repeat("a", maxPathBytes) + "/@v/list",
	} {
		if got, err := ParsePath(p); err == nil {
			t.Errorf("ParsePath(%q) = %+v, want an error", p, got)
		}
	}
}

// FuzzParsePath holds ParsePath to golang.org/x/mod's reading: whatever it
// accepts is a valid module path and canonical version, and is exactly the
// encoding go would send for them.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"golang.org/x/mod/@v/list", "github.com/!burnt!sushi/toml/@v/v1.6.0.zip", "example.com/x/@latest",
		"example.com/lib/@v/v1.0.0-!r!c1.mod", "example.com/old/@v/v2.0.0+incompatible.info",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r, err := ParsePath(p)
		if err != nil {
			return
		}
		if err := module.CheckPath(r.Module); err != nil {
			t.Fatalf("%q: module %q: %v", p, r.Module, err)
		}
		esc, err := module.EscapePath(r.Module)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		want := esc + "/@latest"
		switch r.Kind {
		case KindList:
			want = esc + "/@v/list"
		case KindInfo, KindMod, KindZip:
			if err := module.Check(r.Module, r.Version); err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			ev, err := module.EscapeVersion(r.Version)
			if err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			want = esc + "/@v/" + ev + "." + r.Kind
		case KindLatest:
		default:
			t.Fatalf("%q: kind %q", p, r.Kind)
		}
		if want != p {
			t.Fatalf("ParsePath(%q) = %+v, which go sends as %q", p, r, want)
		}
	})
}
