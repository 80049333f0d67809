package policy

import (
	"fmt"
	"strings"
	"testing"
)

func TestIndexFind(t *testing.T) {
	src := `# comment with [brackets] and "quotes"
top = "value # not a comment"
dotted.key."quoted.part" = 'lit'   # trailing comment
"esc\u0041ped" = 1

[table]
multi = """
[not.a.header]
x = "still a string" """
arr = [ 1, [2, 3], { in = "inline",
  deep = { x = 1 } },   # comment inside
  "last",
]

[[aot]]
name = "first"

[[aot]]
name = "second"
sub = { k = 'v' }

[[aot.nested]]
n = 1

[aot.plain]
p = 2

[ "spaced" . table ]
s = 3
`
	ix := newIndex(src)
	tests := []struct {
		p       path
		wantKey bool
		want    string
	}{
		{keyPath("top"), true, "2:1"},
		{keyPath("top"), false, "2:7"},
		{keyPath("dotted"), true, "3:1"},
		{keyPath("dotted", "key"), true, "3:8"},
		{keyPath("dotted", "key", "quoted.part"), true, "3:12"},
		{keyPath("dotted", "key", "quoted.part"), false, "3:28"},
		{keyPath("escAped"), true, "4:1"},
		{keyPath("table"), false, "6:1"},
		{keyPath("table", "multi"), false, "7:9"},
		{keyPath("not"), true, "1:1"},        // inside a string: not a table, falls back to the top
		{keyPath("table", "x"), true, "6:2"}, // likewise, falls back to the key of [table]
		{keyPath("table", "arr"), false, "10:7"},
		{keyPath("table", "arr").elem(0, false), false, "10:9"},
		{keyPath("table", "arr").elem(1, false).elem(1, false), false, "10:16"},
		{keyPath("table", "arr").elem(2, false), false, "10:20"},
		{keyPath("table", "arr").elem(2, false).key("in"), true, "10:22"},
		{keyPath("table", "arr").elem(2, false).key("deep").key("x"), true, "11:12"},
		{keyPath("table", "arr").elem(3, false), false, "12:3"},
		{keyPath("table", "arr").elem(4, false), false, "10:7"}, // no such element: the array
		{keyPath("aot").elem(0, true), false, "15:1"},
		{keyPath("aot").elem(0, true).key("name"), false, "16:8"},
		{keyPath("aot").elem(1, true).key("name"), false, "19:8"},
		{keyPath("aot").elem(1, true).key("sub").key("k"), false, "20:13"},
		{keyPath("aot").elem(1, true).key("nested").elem(0, true).key("n"), true, "23:1"},
		{keyPath("aot").elem(1, true).key("plain").key("p"), true, "26:1"},
		{keyPath("spaced", "table", "s"), true, "29:1"},
		{keyPath("spaced", "table"), true, "28:14"},
		{keyPath("nowhere", "at", "all"), true, "1:1"},
	}
	for _, tt := range tests {
		line, col := ix.find(tt.p, tt.wantKey)
		if got := fmt.Sprintf("%d:%d", line, col); got != tt.want {
			t.Errorf("find(%s, key=%v) = %s, want %s", tt.p.id(), tt.wantKey, got, tt.want)
		}
	}
}

func TestIndexColumnsCountCharacters(t *testing.T) {
	ix := newIndex("# é\nname = \"héllo\", x = 1\n")
	if line, col := ix.position(len("# é\nname = \"héllo\", ")); line != 2 || col != 17 {
		t.Errorf("position = %d:%d, want 2:17", line, col)
	}
}

func TestPathString(t *testing.T) {
	p := keyPath("profile", "my profile").key("repos").elem(2, false).key("access")
	if got, want := p.String(), `profile."my profile".repos.access`; got != want {
		t.Errorf("String = %s, want %s", got, want)
	}
	if got, want := keyPath("sandbox").elem(0, true).where(), " in [[sandbox]]"; got != want {
		t.Errorf("where = %q, want %q", got, want)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:            "plain",
		`a\tb`:             "a\tb",
		`\u00e9\U0001F600`: "é😀",
		`\x41\e`:           "A\x1b",
		`q\"q\\`:           `q"q\`,
		`\q`:               `\q`,
		`\u12`:             `\u12`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzIndex checks the index against the parser: for any text the parser accepts,
// every key and array element it produced has a position, and a key's position is
// where that key is written.
func FuzzIndex(f *testing.F) {
	f.Add(examplePolicy)
	f.Add("a.\"b.c\".'d' = 1\n[x]\ny = [[1], {z = 2}]\n[[t]]\n[[t.u]]\n[[t]]\n[t.v]\nw = \"\"\"\n[no]\"\"\"\n")
	f.Add("\"\\u0041\\e\\x41\" = 'x'\ni = {\n  a = 1, # c\n  b = [ 'x' , ],\n}\n")
	f.Add("[ a . \"b\" ]\nc = 1979-05-27 07:32:00Z\nd = '''x''''\n")
	f.Fuzz(func(t *testing.T, src string) {
		tree, ix, probs := parse("f.toml", []byte(src))
		if probs != nil {
			return
		}
		var walk func(v any, p path)
		walk = func(v any, p path) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					q := p.key(k)
					l := ix.locs[q.id()]
					if l == nil || l.key < 0 {
						t.Fatalf("no position for key %s in %q", q.id(), src)
					}
					if c := ix.src[l.key]; c != '"' && c != '\'' && !strings.HasPrefix(ix.src[l.key:], k) {
						t.Fatalf("key %s placed at %q in %q", q.id(), ix.src[l.key:], src)
					}
					walk(e, q)
				}
			case []map[string]any:
				// Mostly [[headers]]; but under an empty key ("" = [{}]) the parser
				// types an inline array of tables this way too.
				for i, e := range v {
					q := p.elem(i, true)
					l := ix.locs[q.id()]
					if l == nil || l.val < 0 || !strings.HasPrefix(ix.src[l.val:], "[[") && ix.src[l.val] != '{' {
						t.Fatalf("no [[header]] or inline table for %s in %q", q.id(), src)
					}
					walk(e, q)
				}
			case []any:
				for i, e := range v {
					q := p.elem(i, false)
					if l := ix.locs[q.id()]; l == nil || l.val < 0 || strings.ContainsRune(" \t\r\n,]#", rune(ix.src[l.val])) {
						t.Fatalf("no position for element %s in %q", q.id(), src)
					}
					walk(e, q)
				}
			}
		}
		walk(tree, nil)
	})
}
