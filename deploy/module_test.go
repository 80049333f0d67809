package deploy

import (
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// kubernetesModules are the module path prefixes of the Kubernetes API
// types this module's tests decode the manifests into.
var kubernetesModules = []string{"k8s.io/", "sigs.k8s.io/"}

// The Kubernetes API modules are large and only these tests need them, so
// deploy/ is a module of its own: cproxy's go.mod, which every build of the
// binaries and the container image downloads, must not require them.
func TestMainModuleHasNoKubernetes(t *testing.T) {
	const path = "../go.mod"
	f, err := modfile.Parse(path, []byte(readFile(t, path)), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Require {
		for _, prefix := range kubernetesModules {
			if strings.HasPrefix(r.Mod.Path, prefix) {
				t.Errorf("%s requires %s: import the Kubernetes API types only in deploy/'s tests (their own module), then go mod tidy in the root", path, r.Mod.Path)
			}
		}
	}
}
