// Package pypi is the PyPI route's building blocks: which project and
// version a distribution file belongs to, by its name, so that a file is
// served only under its own project and only for a version the policy lets
// the sandbox see.
package pypi

import (
	"errors"
	"fmt"
	"strings"

	pep440 "github.com/aquasecurity/go-pep440-version"

	"github.com/cproxy/cproxy/policy"
)

// A distribution file's kinds.
const (
	KindWheel = "wheel" // NAME-VERSION(-BUILD)?-PY-ABI-PLATFORM.whl
	KindSdist = "sdist" // NAME-VERSION.tar.gz, or .zip for old ones
)

// metadataSuffix ends the name of a wheel's core metadata file (PEP 658).
const metadataSuffix = ".metadata"

// maxFilenameBytes bounds a file name; PyPI's longest are well under it.
const maxFilenameBytes = 255

// ErrNotOurs is returned for a file name that is not a distribution of the
// project asked for, or that cannot be told apart from another project's.
var ErrNotOurs = errors.New("not a distribution file of the project")

// File is a distribution file named in a request.
type File struct {
	// Project is the PEP 503-normalised project the file belongs to.
	Project string
	// Version is the version as the file name spells it ("2.32.3",
	// "1.0rc1"), a valid PEP 440 version.
	Version string
	// Kind is KindWheel or KindSdist.
	Kind string
	// Metadata is true for the file's PEP 658 core metadata (NAME.metadata)
	// rather than the file itself.
	Metadata bool
}

// FileOf reads filename as a distribution of project (normalised or not)
// and returns it, or ErrNotOurs when it is not one: another project's file,
// a name that is not a wheel's or an sdist's, a version that is not PEP 440,
// or an sdist name that splits into a project and a version in more than
// one way ("a-1-2.tar.gz": a 1-2 or a-1 2), which could dodge the policy of
// one of them.
func FileOf(project, filename string) (File, error) {
	project = policy.NormalizePyPIName(project)
	f := File{Project: project}
	name, meta := strings.CutSuffix(filename, metadataSuffix)
	f.Metadata = meta
	if project == "" || len(filename) > maxFilenameBytes || strings.ContainsAny(name, "/\\\x00") || strings.HasPrefix(name, ".") {
		return File{}, ErrNotOurs
	}
	var err error
	if stem, ok := strings.CutSuffix(name, ".whl"); ok {
		f.Kind = KindWheel
		f.Version, err = wheelVersion(project, stem)
	} else if stem, ok := sdistStem(name); ok && !meta {
		f.Kind = KindSdist
		f.Version, err = sdistVersion(project, stem)
	} else {
		return File{}, ErrNotOurs
	}
	if err != nil {
		return File{}, err
	}
	return f, nil
}

// wheelVersion reads a wheel's name without .whl (PEP 427): its name part
// has no "-" (they are written "_"), so the parts split one way only.
func wheelVersion(project, stem string) (string, error) {
	parts := strings.Split(stem, "-")
	if len(parts) != 5 && len(parts) != 6 {
		return "", ErrNotOurs
	}
	for _, p := range parts {
		if p == "" {
			return "", ErrNotOurs
		}
	}
	if len(parts) == 6 && (parts[2][0] < '0' || parts[2][0] > '9') {
		return "", ErrNotOurs // a build tag starts with a digit
	}
	if policy.NormalizePyPIName(parts[0]) != project || !isVersion(parts[1]) {
		return "", ErrNotOurs
	}
	return parts[1], nil
}

// sdistStem cuts an sdist's archive suffix.
func sdistStem(name string) (string, bool) {
	for _, ext := range []string{".tar.gz", ".zip"} {
		if stem, ok := strings.CutSuffix(name, ext); ok {
			return stem, true
		}
	}
	return "", false
}

// sdistVersion finds the one place an sdist's stem splits into a name and a
// PEP 440 version; the name must be project's.
func sdistVersion(project, stem string) (string, error) {
	var found []int
	for i := 0; i < len(stem); i++ {
		if stem[i] == '-' && i > 0 && isVersion(stem[i+1:]) {
			found = append(found, i)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%w: %d ways to read a version", ErrNotOurs, len(found))
	}
	i := found[0]
	if policy.NormalizePyPIName(stem[:i]) != project {
		return "", ErrNotOurs
	}
	return stem[i+1:], nil
}

// isVersion reports whether s is a PEP 440 version, without the spaces
// PEP 440 allows around one and a file name does not hold.
func isVersion(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	_, err := pep440.Parse(s)
	return err == nil
}
