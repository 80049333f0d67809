// Package gomod is the Go modules route: the GOPROXY protocol, at /gomod/,
// for the modules a sandbox's profile allows ([profile.NAME.go]).
//
// This file reads the protocol's request paths. The route that serves them
// is being built on it.
package gomod

import (
	"errors"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// Kinds of request of the GOPROXY protocol.
const (
	KindList   = "list"   // $module/@v/list
	KindLatest = "latest" // $module/@latest
	KindInfo   = "info"   // $module/@v/$version.info
	KindMod    = "mod"    // $module/@v/$version.mod
	KindZip    = "zip"    // $module/@v/$version.zip
)

// maxPathBytes bounds a request path: module paths are short, and a long
// one is refused before it is decoded.
const maxPathBytes = 1024

// Request is one GOPROXY request, decoded.
type Request struct {
	// Module is the module path as go names it, case-decoded
	// ("github.com/BurntSushi/toml").
	Module string
	// Version is the canonical version asked for; empty for list and latest.
	Version string
	// Kind is one of the Kind constants.
	Kind string
}

// ErrPath is a request path that is not one of the GOPROXY protocol's.
var ErrPath = errors.New("not a module proxy request")

// ParsePath reads p, the request path under the route's prefix with its
// percent-encoding undone (as net/http's URL.Path holds it: go sends
// "%21" for the "!" of a capital), as one GOPROXY request. The module path
// and version are case-decoded with golang.org/x/mod/module and refused
// unless they are valid and the version canonical ("v1.2", "latest" and
// "master" are queries that go resolves through @latest and list, never
// sent as a version), and unless they encode back to exactly p's bytes,
// so that one request has one spelling.
func ParsePath(p string) (Request, error) {
	if len(p) > maxPathBytes {
		return Request{}, ErrPath
	}
	var r Request
	escMod, rest, ok := strings.Cut(p, "/@")
	switch {
	case !ok:
		return Request{}, ErrPath
	case rest == "latest":
		r.Kind = KindLatest
	case rest == "v/list":
		r.Kind = KindList
	case strings.HasPrefix(rest, "v/"):
		file := rest[len("v/"):]
		dot := strings.LastIndexByte(file, '.')
		if dot < 0 {
			return Request{}, ErrPath
		}
		switch ext := file[dot+1:]; ext {
		case KindInfo, KindMod, KindZip:
			r.Kind = ext
		default:
			return Request{}, ErrPath
		}
		v, err := module.UnescapeVersion(file[:dot])
		if err != nil || strings.Contains(v, "/") {
			return Request{}, ErrPath
		}
		r.Version = v
	default:
		return Request{}, ErrPath
	}
	mod, err := module.UnescapePath(escMod)
	if err != nil || module.CheckPath(mod) != nil {
		return Request{}, ErrPath
	}
	r.Module = mod
	if r.Version != "" {
		base := strings.TrimSuffix(r.Version, "+incompatible")
		if semver.Canonical(base) != base || module.Check(r.Module, r.Version) != nil {
			return Request{}, ErrPath
		}
	}
	if r.path() != p {
		return Request{}, ErrPath
	}
	return r, nil
}

// path is the request's path under the prefix, encoded as go encodes it.
func (r Request) path() string {
	esc, err := module.EscapePath(r.Module)
	if err != nil {
		return ""
	}
	switch r.Kind {
	case KindLatest:
		return esc + "/@latest"
	case KindList:
		return esc + "/@v/list"
	}
	v, err := module.EscapeVersion(r.Version)
	if err != nil {
		return ""
	}
	return esc + "/@v/" + v + "." + r.Kind
}
