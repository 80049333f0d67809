package pypi

import (
	"errors"
	"strings"
	"testing"

	pep440 "github.com/aquasecurity/go-pep440-version"

	"github.com/cproxy/cproxy/policy"
)

func TestFileOf(t *testing.T) {
	for _, c := range []struct {
		project, file string
		want          File
	}{
		{"requests", "requests-2.32.3-py3-none-any.whl", File{"requests", "2.32.3", KindWheel, false}},
		{"Requests", "requests-2.32.3-py3-none-any.whl.metadata", File{"requests", "2.32.3", KindWheel, true}},
		{"zope.interface", "zope.interface-6.1-cp311-cp311-manylinux_2_17_x86_64.whl", File{"zope-interface", "6.1", KindWheel, false}},
		{"typing-extensions", "typing_extensions-4.12.2-1-py3-none-any.whl", File{"typing-extensions", "4.12.2", KindWheel, false}},
		{"python-dateutil", "python-dateutil-2.8.2.tar.gz", File{"python-dateutil", "2.8.2", KindSdist, false}},
		{"python-dateutil", "python_dateutil-2.9.0.post0.tar.gz", File{"python-dateutil", "2.9.0.post0", KindSdist, false}},
		{"foo", "Foo-1.0rc1.zip", File{"foo", "1.0rc1", KindSdist, false}},
	} {
		got, err := FileOf(c.project, c.file)
		if err != nil || got != c.want {
			t.Errorf("FileOf(%q, %q) = %+v, %v; want %+v", c.project, c.file, got, err, c.want)
		}
	}
}

func TestFileOfRefuses(t *testing.T) {
	for _, c := range []struct{ project, file string }{
		{"requests", "urllib3-2.2.0-py3-none-any.whl"},        // another project's
		{"request", "requests-2.32.3-py3-none-any.whl"},       // a prefix of the name is not the name
		{"requests", "requests-2.32.3-x-py3-none-any.whl"},    // a build tag starts with a digit
		{"requests", "requests-2.32.3-py3-none.whl"},          // too few tags
		{"requests", "requests-notaversion-py3-none-any.whl"}, // not PEP 440
		{"requests", "requests-2.32.3.tar.gz.metadata"},       // only wheels have PEP 658 metadata here
		{"requests", "requests-2.32.3.exe"},                   // not a wheel or an sdist
		{"requests", "../requests-2.32.3.tar.gz"},
		{"requests", "requests-2.32.3 .tar.gz"},
		{"a", "a-1-2.tar.gz"},   // a 1-2 (1.post2), or a-1 2: refused under both
		{"a-1", "a-1-2.tar.gz"}, //
		{"", "requests-2.32.3.tar.gz"},
		{"requests", strings.Repeat("r", 300) + ".tar.gz"},
	} {
		if got, err := FileOf(c.project, c.file); !errors.Is(err, ErrNotOurs) {
			t.Errorf("FileOf(%q, %q) = %+v, %v; want ErrNotOurs", c.project, c.file, got, err)
		}
	}
}

// FuzzFileOf holds FileOf to what the route relies on: a file it accepts
// belongs to the project asked, in normal form, at a version the PEP 440
// library reads; and no file is accepted under two projects.
func FuzzFileOf(f *testing.F) {
	for _, s := range []string{"requests-2.32.3-py3-none-any.whl", "python-dateutil-2.8.2.tar.gz", "a-1-2.tar.gz", "Foo_Bar-1.0-1-py3-none-any.whl.metadata", "x.zip"} {
		f.Add("requests", s)
		f.Add("python-dateutil", s)
		f.Add("foo-bar", s)
	}
	f.Fuzz(func(t *testing.T, project, file string) {
		got, err := FileOf(project, file)
		if err != nil {
			return
		}
		if got.Project != policy.NormalizePyPIName(project) || got.Project == "" {
			t.Fatalf("FileOf(%q, %q) = %+v: project not the one asked", project, file, got)
		}
		if _, err := pep440.Parse(got.Version); err != nil || !strings.Contains(file, got.Version) {
			t.Fatalf("FileOf(%q, %q) = %+v: version %v", project, file, got, err)
		}
		// No other name the file could be cut into takes it.
		for i := range len(file) {
			if file[i] != '-' || policy.NormalizePyPIName(file[:i]) == got.Project {
				continue
			}
			if o, err := FileOf(file[:i], file); err == nil {
				t.Fatalf("FileOf accepts %q under %q (%+v) and %q (%+v)", file, project, got, file[:i], o)
			}
		}
	})
}
