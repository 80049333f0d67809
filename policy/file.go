package policy

import "reflect"

// The config package loads the config file with this package's strict TOML
// decoding, so that both files report problems the same way, one Problems type
// for a config and the policy it names. File and Key are that decoding, for it.

// Key names a value in a config or policy file, such as relay.mod.paths[2].
type Key struct{ p path }

// KeyOf is the key named by keys, the outermost first.
func KeyOf(keys ...string) Key { return Key{keyPath(keys...)} }

// Dot is the key name inside k.
func (k Key) Dot(name string) Key { return Key{k.p.key(name)} }

// Elem is the i-th element of the array k.
func (k Key) Elem(i int) Key { return Key{k.p.elem(i, false)} }

// String is the key as messages show it: dotted, without array indices.
func (k Key) String() string { return k.p.String() }

// File is a config or policy file parsed for strict decoding: it records
// which keys the file sets and where, and collects every problem found in it
// with its position.
type File struct {
	d    *decoder
	tree map[string]any
}

// ParseFile parses data, the TOML text of file; a syntax error is its one
// problem. Both may be empty: the file then sets nothing and its problems
// have no position worth giving.
func ParseFile(file string, data []byte) (*File, Problems) {
	tree, ix, probs := parse(file, data)
	if probs != nil {
		return nil, probs
	}
	return &File{d: newDecoder(file, ix), tree: tree}, nil
}

// Decode sets the struct v points to from the file, by its fields' toml tags,
// reporting every unknown key, wrong type and bad text; v keeps its value
// wherever the file is wrong, and where the file does not set it: a map in v
// keeps its entries, and an entry the file sets is decoded over the one of
// that name. topHint, if set, may add advice to an unknown top-level key's
// message when no known key is close.
func (f *File) Decode(v any, topHint func(key string) string) {
	if topHint != nil {
		f.d.hint = func(p path, key string) string {
			if len(p) > 0 {
				return ""
			}
			return topHint(key)
		}
	}
	f.d.decode(reflect.ValueOf(v).Elem(), f.tree, nil)
}

// Keys are the file's top-level keys, sorted.
func (f *File) Keys() []string { return sortedKeys(f.tree) }

// Unknown reports key, a key in table (KeyOf() for the top level), as
// unknown: with the known key it is a typo of, else with hint.
func (f *File) Unknown(table Key, key string, known []string, hint string) {
	saved := f.d.hint
	f.d.hint = func(path, string) string { return hint }
	f.d.unknownKey(table.p, key, known)
	f.d.hint = saved
}

// Sets reports whether the file sets key, a dotted name without indices such
// as "upstream.anthropic.auth".
func (f *File) Sets(key string) bool { return f.d.named[key] }

// Has reports whether the file sets k.
func (f *File) Has(k Key) bool { return f.d.has(k.p) }

// AtKey reports a problem placed at k's key.
func (f *File) AtKey(k Key, format string, args ...any) { f.d.atKey(k.p, format, args...) }

// AtValue reports a problem placed at k's value; nothing when that value
// failed to decode, which has been reported already.
func (f *File) AtValue(k Key, format string, args ...any) { f.d.atValue(k.p, format, args...) }

// Missing reports a required key the file does not set, placed at the table
// that lacks it; nothing when an unknown key there was taken for a typo of it.
func (f *File) Missing(key, table Key, format string, args ...any) {
	f.d.missing(key.p, table.p, format, args...)
}

// CheckGlobs checks a list of globs, each also with check if not nil, and
// refuses duplicates.
func (f *File) CheckGlobs(k Key, globs []string, check func(string) error) {
	checkGlobs(f.d, k.p, globs, check)
}

// Position is where the file sets k (its value), else the nearest enclosing
// key it sets, else 1:1.
func (f *File) Position(k Key) (line, col int) { return f.d.ix.find(k.p, false) }

// Problems are the problems found so far, in the order they were found.
func (f *File) Problems() Problems { return f.d.probs }

// Sort orders one file's problems by position, so that output does not
// depend on map iteration order.
func (ps Problems) Sort() { sortProblems(ps) }

// ReadProblem words a ReadFile error without repeating the file name, for a
// problem about the file.
func ReadProblem(err error) string { return readProblem(err) }

// ConfigKeys are the config file's top-level keys, which a policy file
// refuses with a hint that they belong in the config; the config package's
// tests hold them to its Config's fields.
var ConfigKeys = []string{"approvals", "claude", "console", "keyring", "listen", "log", "mcp", "policy", "policy_settle", "relay", "runtime", "store", "upstream"}

// PolicyKeys are the policy file's top-level keys.
var PolicyKeys = []string{"profile", "sandbox"}

// keyPath is the path of keys, the outermost first.
func keyPath(keys ...string) path {
	var p path
	for _, k := range keys {
		p = p.key(k)
	}
	return p
}
