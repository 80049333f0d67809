package gomod

import (
	"slices"
	"testing"
)

func TestVisibleVersions(t *testing.T) {
	list := []byte("v1.0.0\nv1.2.0\nv1.1.0-rc.1\n\nv2.0.0\nv1.3\nmaster\nv1.0.0-20261101120000-abcdefabcdef\nv1.4.0\r\n")
	hidden := map[string]bool{"v1.2.0": true}
	got := VisibleVersions("example.com/lib", list, func(v string) bool { return !hidden[v] })
	// v2.0.0 is not a version of a module without /v2; v1.3 and master are
	// not canonical; a pseudo-version is never listed by a module proxy.
	if want := []string{"v1.0.0", "v1.1.0-rc.1", "v1.4.0"}; !slices.Equal(got, want) {
		t.Errorf("VisibleVersions = %q, want %q", got, want)
	}
	got = VisibleVersions("example.com/old", []byte("v1.0.0\nv2.0.0+incompatible\n"), func(string) bool { return true })
	if want := []string{"v1.0.0", "v2.0.0+incompatible"}; !slices.Equal(got, want) {
		t.Errorf("VisibleVersions(+incompatible) = %q, want %q", got, want)
	}
}

func TestNewest(t *testing.T) {
	for _, c := range []struct {
		versions []string
		want     string
	}{
		{[]string{"v1.0.0", "v1.4.0", "v1.10.0", "v1.11.0-rc.1"}, "v1.10.0"},
		{[]string{"v1.1.0-rc.1", "v1.1.0-beta.2"}, "v1.1.0-rc.1"},
		{nil, ""},
	} {
		if got := Newest(c.versions); got != c.want {
			t.Errorf("Newest(%q) = %q, want %q", c.versions, got, c.want)
		}
	}
}
