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
// the units where the tool is installed.
package deploy
