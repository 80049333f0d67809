// Package deploy holds cproxy's deployment files, not code: a hardened systemd
// unit with a sample config and policy, and a template unit with a sample
// config for replicas on the shared PostgreSQL store (systemd/); Kubernetes
// manifests with the NetworkPolicies that keep sandboxes to the proxy port and
// the harness alone on the admin port (kubernetes/), and the files that replace
// three of them for several replicas (kubernetes/replicas/); and a
// Containerfile. docs/deploy.md explains them.
//
// Its tests load the shipped configs with cproxy's own loader, decode every
// manifest strictly into the Kubernetes API types, check that the pieces agree
// (ports, labels, mounts, credential paths), and run systemd-analyze verify on
// the units where the tool is installed. It is a module of its own, so that the
// Kubernetes API modules those tests need stay out of cproxy's go.mod (and out
// of every build of the binaries and the image); .ci/test runs its tests. Its
// go.mod points cproxy's module at ../ and requires every module the imported
// cproxy packages need, so a change to cproxy's go.mod is followed by go mod
// tidy here.
package deploy
