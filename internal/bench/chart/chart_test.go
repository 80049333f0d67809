package chart

import (
	"bytes"
	"encoding/xml"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.svg from the current output")

func sample() *Chart {
	return &Chart{
		Title:  "Latency <per request> & more",
		Note:   "Bars: median; dots: each run.",
		Desc:   "A test chart.",
		Series: []Series{{"direct", "#8c8c8c"}, {"Go proxy", "#56b4e9"}, {"cproxy", "#e69f00"}},
		Panels: []Panel{
			{Title: "1 client", Unit: "µs", Groups: []Group{
				{Label: "p50", Bars: []Bar{{Value: 110}, {Value: 240, Samples: []float64{230, 240, 260}}, {Value: 310, Samples: []float64{300, 310, 330}}}},
				{Label: "p99", Bars: []Bar{{Value: 400}, {Missing: true}, {Value: 1234.5}}},
			}},
			{Title: "16 clients", Unit: "µs", Groups: []Group{
				{Label: "p50", Bars: []Bar{{Value: 0.5}, {Value: 0.25}, {Value: 0.125}}},
			}},
		},
	}
}

// element is the XML tree, enough to look for elements and their text.
type element struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []element  `xml:",any"`
}

func (e element) count(local string) int {
	n := 0
	if e.XMLName.Local == local {
		n++
	}
	for _, c := range e.Children {
		n += c.count(local)
	}
	return n
}

func (e element) texts(local string) []string {
	var s []string
	if e.XMLName.Local == local {
		s = append(s, e.Text)
	}
	for _, c := range e.Children {
		s = append(s, c.texts(local)...)
	}
	return s
}

func decode(t *testing.T, svg []byte) element {
	t.Helper()
	// Well-formed: every token decodes, to the end.
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
	}
	var root element
	if err := xml.Unmarshal(svg, &root); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestSVG(t *testing.T) {
	svg, err := sample().SVG()
	if err != nil {
		t.Fatal(err)
	}
	root := decode(t, svg)
	if root.XMLName.Space != "http://www.w3.org/2000/svg" || root.XMLName.Local != "svg" {
		t.Fatalf("root is %v, want svg in the SVG namespace", root.XMLName)
	}
	attrs := map[string]string{}
	for _, a := range root.Attrs {
		attrs[a.Name.Local] = a.Value
	}
	if attrs["role"] != "img" || attrs["aria-labelledby"] != "title desc" || attrs["viewBox"] == "" {
		t.Errorf("svg attributes %v: want role=img, aria-labelledby and a viewBox", attrs)
	}
	if len(root.Children) < 2 || root.Children[0].XMLName.Local != "title" || root.Children[1].XMLName.Local != "desc" {
		t.Fatal("the svg must open with <title> and <desc>")
	}
	if got := root.Children[0].Text; got != "Latency <per request> & more" {
		t.Errorf("title %q", got)
	}
	desc := root.Children[1].Text
	for _, want := range []string{"A test chart.", "1 client: p50: direct 110 µs, Go proxy 240 µs, cproxy 310 µs; p99: direct 400 µs, cproxy 1234 µs.", "16 clients: p50: direct 0.5 µs"} {
		if !strings.Contains(desc, want) {
			t.Errorf("desc %q lacks %q", desc, want)
		}
	}
	// Bars: 8 drawn (one missing), 3 legend swatches, the background.
	if got := root.count("rect"); got != 8+3+1 {
		t.Errorf("%d rects, want 12", got)
	}
	if got := root.count("circle"); got != 6 {
		t.Errorf("%d dots, want 6 (the samples)", got)
	}
	texts := strings.Join(root.texts("text"), "|")
	for _, want := range []string{"direct", "Go proxy", "cproxy", "1 client", "16 clients", "p50", "p99", "µs", "1234", "0.125"} {
		if !strings.Contains(texts, want) {
			t.Errorf("no text %q in %s", want, texts)
		}
	}
}

// TestDeterministic pins the output for a fixed input: the same chart gives
// the same bytes, here and in testdata (go test -update rewrites it after a
// deliberate change of the drawing).
func TestDeterministic(t *testing.T) {
	a, err := sample().SVG()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sample().SVG()
	if !bytes.Equal(a, b) {
		t.Fatal("two drawings of one chart differ")
	}
	golden := filepath.Join("testdata", "sample.svg")
	if *update {
		if err := os.WriteFile(golden, a, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, want) {
		t.Errorf("output differs from %s (go test ./internal/bench/chart -update if the change is meant)", golden)
	}
}

func TestSVGRejects(t *testing.T) {
	for name, change := range map[string]func(*Chart){
		"no series":       func(c *Chart) { c.Series = nil },
		"no panels":       func(c *Chart) { c.Panels = nil },
		"no groups":       func(c *Chart) { c.Panels[1].Groups = nil },
		"a bar too few":   func(c *Chart) { c.Panels[0].Groups[0].Bars = c.Panels[0].Groups[0].Bars[:2] },
		"NaN":             func(c *Chart) { c.Panels[0].Groups[0].Bars[0].Value = math.NaN() },
		"negative sample": func(c *Chart) { c.Panels[0].Groups[0].Bars[1].Samples[0] = -1 },
		"infinite":        func(c *Chart) { c.Panels[1].Groups[0].Bars[2].Value = math.Inf(1) },
	} {
		c := sample()
		change(c)
		if _, err := c.SVG(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestAxis(t *testing.T) {
	for _, tc := range []struct {
		max, top, step float64
		ticks          string
	}{
		{0, 1, 0.2, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{1234.5, 1250, 250, "0 250 500 750 1000 1250"},
		{100, 100, 20, "0 20 40 60 80 100"},
		{0.5, 0.5, 0.1, "0.0 0.1 0.2 0.3 0.4 0.5"},
		{3.04, 4, 1, "0 1 2 3 4"},
		{7, 8, 2, "0 2 4 6 8"},
	} {
		top, step := axis(tc.max)
		var ticks []string
		for i := 0; float64(i)*step <= top+step/2; i++ {
			ticks = append(ticks, tick(float64(i)*step, step))
		}
		if math.Abs(top-tc.top) > 1e-9 || math.Abs(step-tc.step) > 1e-9 || strings.Join(ticks, " ") != tc.ticks {
			t.Errorf("axis(%v) = %v, %v, ticks %q; want %v, %v, %q", tc.max, top, step, ticks, tc.top, tc.step, tc.ticks)
		}
	}
}

func TestFormatAuto(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1234.4: "1234", 123.6: "124", 12.34: "12.3", 1.234: "1.23", 0.1234: "0.123"} {
		if got := FormatAuto(v); got != want {
			t.Errorf("FormatAuto(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 10, ""},
		{"one two three", 20, "one two three"},
		{"one two three", 7, "one two|three"},
		{"a verylongword b", 4, "a|verylongword|b"},
	} {
		if got := strings.Join(wrap(tc.in, tc.n), "|"); got != tc.want {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
