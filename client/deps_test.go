package client

import (
	"go/build"
	"strings"
	"testing"
)

// The package must stay easy to vendor: the standard library only.
func TestStandardLibraryOnly(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("client imports %s, which is not in the standard library", imp)
		}
	}
}
