// Package chart draws the bar charts of docs/benchmarks.md as SVG, by hand
// and with the standard library only: one or more panels of grouped bars
// stacked top to bottom, each with its own y axis from zero, a legend, the
// value over each bar and, optionally, the single samples a bar is the median
// of as dots, so the spread between runs shows.
//
// The output depends only on the Chart: no map is ranged over, no clock or
// random number is read, and every number is formatted with a fixed
// precision, so the same input gives the same bytes and a committed chart can
// be checked by a test.
package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Chart is a figure of panels of grouped bars sharing one legend.
type Chart struct {
	// Title is the heading drawn on top and the SVG's <title>.
	Title string
	// Note is a smaller line under the title: what the bars and dots are,
	// which way is better. Empty: none.
	Note string
	// Desc opens the SVG's <desc>, for screen readers; the value of every
	// bar is appended to it.
	Desc string
	// Series name the bars of each group, in order, with their fill
	// colours ("#rrggbb").
	Series []Series
	Panels []Panel
	// Columns is how many panels go side by side, filling rows from the
	// left; zero means 1.
	Columns int
	// Width is the width in pixels; zero means 800, which GitHub shows
	// unscaled in a page of text.
	Width int
	// Format writes a value over its bar and in <desc>; nil means
	// FormatAuto.
	Format func(float64) string
}

// Series is one kind of bar, the same in every group.
type Series struct {
	Name  string
	Color string
}

// Panel is one plot with its own y axis.
type Panel struct {
	// Title is drawn over the panel; empty: none.
	Title string
	// Unit labels the y axis and follows values in <desc>.
	Unit   string
	Groups []Group
}

// Group is a cluster of bars under one label on the x axis.
type Group struct {
	// Label is written under the group; it may be empty for a panel's only
	// group, whose panel title says what it is.
	Label string
	// Bars are in the order of Chart.Series; a bar with Missing set takes
	// its place but is not drawn (a target that did not run).
	Bars []Bar
}

// Bar is one bar.
type Bar struct {
	Value float64
	// Samples, if any, are drawn as dots over the bar: the values Value
	// summarises.
	Samples []float64
	Missing bool
}

// Geometry, in pixels.
const (
	defaultWidth = 800
	outerMargin  = 16
	// axisRoom is left of a plot for the tick labels, and unitRoom more for
	// the unit along the axis in the first column.
	axisRoom   = 42
	unitRoom   = 16
	titleSize  = 18
	textSize   = 13
	smallSize  = 11
	plotHeight = 190
	// charWidth estimates the width of a character at textSize, for
	// laying out the legend (no font metrics here).
	charWidth = 7.2
)

const fontFamily = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif"

// FormatAuto writes v with three significant digits or more: 1234, 123,
// 12.3, 1.23, 0.123.
func FormatAuto(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100 || a == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// SVG draws the chart.
func (c *Chart) SVG() ([]byte, error) {
	if len(c.Series) == 0 || len(c.Panels) == 0 {
		return nil, fmt.Errorf("chart %q: no series or no panels", c.Title)
	}
	for _, p := range c.Panels {
		if len(p.Groups) == 0 {
			return nil, fmt.Errorf("chart %q, panel %q: no groups", c.Title, p.Title)
		}
		for _, g := range p.Groups {
			if len(g.Bars) != len(c.Series) {
				return nil, fmt.Errorf("chart %q, panel %q, group %q: %d bars for %d series", c.Title, p.Title, g.Label, len(g.Bars), len(c.Series))
			}
			for _, b := range g.Bars {
				for _, v := range append([]float64{b.Value}, b.Samples...) {
					if !b.Missing && (math.IsNaN(v) || math.IsInf(v, 0) || v < 0) {
						return nil, fmt.Errorf("chart %q, group %q: value %v: bars start at zero and must be finite", c.Title, g.Label, v)
					}
				}
			}
		}
	}
	format := c.Format
	if format == nil {
		format = FormatAuto
	}
	width := c.Width
	if width == 0 {
		width = defaultWidth
	}

	var body bytes.Buffer
	y := 30.0
	fmt.Fprintf(&body, "<text x=\"%s\" y=\"%s\" font-size=\"%d\" font-weight=\"bold\">%s</text>\n", num(outerMargin), num(y), titleSize, esc(c.Title))
	for i, line := range wrap(c.Note, int((float64(width)-2*outerMargin)/charWidth)) {
		y += 18
		if i == 0 {
			y += 4
		}
		fmt.Fprintf(&body, "<text x=\"%s\" y=\"%s\" font-size=\"%d\" fill=\"#555555\">%s</text>\n", num(outerMargin), num(y), textSize, esc(line))
	}
	y = c.legend(&body, y+26, float64(width))
	cols := max(c.Columns, 1)
	cell := (float64(width) - 2*outerMargin) / float64(cols)
	rowTop := y
	for i, p := range c.Panels {
		col := i % cols
		if col == 0 {
			rowTop = y
		}
		x0 := outerMargin + float64(col)*cell
		y = math.Max(y, c.panel(&body, p, x0, x0+cell, rowTop+12, col == 0, format))
	}
	height := math.Ceil(y + 12)

	var out bytes.Buffer
	fmt.Fprintf(&out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%s\" viewBox=\"0 0 %d %s\" role=\"img\" aria-labelledby=\"title desc\" font-family=\"%s\" fill=\"#1f2328\">\n",
		width, num(height), width, num(height), esc(fontFamily))
	fmt.Fprintf(&out, "<title id=\"title\">%s</title>\n<desc id=\"desc\">%s</desc>\n", esc(c.Title), esc(c.describe(format)))
	// A background of its own, so the chart reads the same in GitHub's
	// dark theme.
	fmt.Fprintf(&out, "<rect width=\"%d\" height=\"%s\" fill=\"#ffffff\"/>\n", width, num(height))
	out.Write(body.Bytes())
	out.WriteString("</svg>\n")
	return out.Bytes(), nil
}

// legend draws a swatch and name per series, wrapping to a new line when
// the width runs out, and returns the y under it.
func (c *Chart) legend(w *bytes.Buffer, y, width float64) float64 {
	w.WriteString("<g class=\"legend\">\n")
	x := float64(outerMargin)
	for _, s := range c.Series {
		item := 18 + float64(len([]rune(s.Name)))*charWidth + 22
		if x+item > width-outerMargin && x > outerMargin {
			x, y = outerMargin, y+22
		}
		fmt.Fprintf(w, "<rect x=\"%s\" y=\"%s\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", num(x), num(y-11), esc(s.Color))
		fmt.Fprintf(w, "<text x=\"%s\" y=\"%s\" font-size=\"%d\">%s</text>\n", num(x+18), num(y), textSize, esc(s.Name))
		x += item
	}
	w.WriteString("</g>\n")
	return y + 8
}

// panel draws one panel between x0 and x1 from y down, with the unit along
// its axis if it is the first of its row, and returns the y under it.
func (c *Chart) panel(w *bytes.Buffer, p Panel, x0, x1, y float64, first bool, format func(float64) string) float64 {
	w.WriteString("<g class=\"panel\">\n")
	if p.Title != "" {
		y += 18
		fmt.Fprintf(w, "<text x=\"%s\" y=\"%s\" font-size=\"%d\" font-weight=\"bold\">%s</text>\n", num(x0), num(y), textSize+1, esc(p.Title))
	}
	top := y + 22 // room for the value over the tallest bar
	bottom := top + plotHeight
	left, right := x0+axisRoom, x1-8
	if first {
		left += unitRoom
	}

	top1, step := axis(p.max())
	ypos := func(v float64) float64 { return bottom - v/top1*plotHeight }
	for i := 0; float64(i)*step <= top1+step/2; i++ {
		t := float64(i) * step
		yy := ypos(t)
		colour := "#e4e4e4"
		if t == 0 {
			colour = "#8c8c8c"
		}
		fmt.Fprintf(w, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"1\"/>\n", num(left), num(yy), num(right), num(yy), colour)
		fmt.Fprintf(w, "<text x=\"%s\" y=\"%s\" font-size=\"%d\" text-anchor=\"end\" fill=\"#555555\">%s</text>\n", num(left-6), num(yy+4), smallSize, esc(tick(t, step)))
	}
	if first {
		// The unit, along the y axis.
		mid, ux := (top+bottom)/2, x0+12
		fmt.Fprintf(w, "<text x=\"%s\" y=\"%s\" font-size=\"%d\" text-anchor=\"middle\" fill=\"#555555\" transform=\"rotate(-90 %s %s)\">%s</text>\n",
			num(ux), num(mid), smallSize+1, num(ux), num(mid), esc(p.Unit))
	}

	groupW := (right - left) / float64(len(p.Groups))
	inner := groupW * 0.8
	if len(p.Groups) == 1 {
		inner = groupW * 0.92
	}
	barW := math.Min(inner/float64(len(c.Series)), 72)
	gap := math.Min(3, barW/6)
	for gi, g := range p.Groups {
		gx := left + float64(gi)*groupW + (groupW-barW*float64(len(c.Series)))/2
		for bi, b := range g.Bars {
			if b.Missing {
				continue
			}
			s := c.Series[bi]
			x := gx + float64(bi)*barW
			yy := ypos(b.Value)
			fmt.Fprintf(w, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"%s\"><title>%s</title></rect>\n",
				num(x+gap/2), num(yy), num(barW-gap), num(bottom-yy), esc(s.Color), esc(fmt.Sprintf("%s, %s: %s %s", s.Name, g.Label, format(b.Value), p.Unit)))
			// Samples as dots, spread across the bar in the order given.
			n := len(b.Samples)
			spread := math.Min(5, (barW-gap-6)/float64(max(n, 1)))
			for si, v := range b.Samples {
				cx := x + barW/2 + (float64(si)-float64(n-1)/2)*spread
				fmt.Fprintf(w, "<circle cx=\"%s\" cy=\"%s\" r=\"2.5\" fill=\"#ffffff\" stroke=\"#1f2328\" stroke-width=\"1\"/>\n", num(cx), num(ypos(v)))
			}
			label := yy - 5
			for _, v := range b.Samples {
				label = math.Min(label, ypos(v)-6)
			}
			fmt.Fprintf(w, "<text x=\"%s\" y=\"%s\" font-size=\"%d\" text-anchor=\"middle\">%s</text>\n", num(x+barW/2), num(label), smallSize, esc(format(b.Value)))
		}
		if g.Label != "" {
			fmt.Fprintf(w, "<text x=\"%s\" y=\"%s\" font-size=\"%d\" text-anchor=\"middle\">%s</text>\n", num(left+(float64(gi)+0.5)*groupW), num(bottom+18), textSize, esc(g.Label))
		}
	}
	w.WriteString("</g>\n")
	return bottom + 24
}

// max is the largest value or sample drawn in the panel.
func (p Panel) max() float64 {
	m := 0.0
	for _, g := range p.Groups {
		for _, b := range g.Bars {
			if b.Missing {
				continue
			}
			m = math.Max(m, b.Value)
			for _, v := range b.Samples {
				m = math.Max(m, v)
			}
		}
	}
	return m
}

// axis picks the top of a y axis from zero and its tick step: a step of 1,
// 2 or 5 times a power of ten giving at most six intervals, with the top
// the first tick at or over max.
func axis(max float64) (top, step float64) {
	if max <= 0 {
		return 1, 0.2
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 2.5, 5, 10} {
		step = f * mag
		if step >= raw {
			break
		}
	}
	return math.Ceil(max/step-1e-9) * step, step
}

// tick writes an axis label with as many decimals as the step needs.
func tick(v, step float64) string {
	d := 0
	for s := step; s < 1 && d < 6; s *= 10 {
		d++
	}
	if x := step * math.Pow(10, float64(d)); math.Abs(x-math.Round(x)) > 1e-9 {
		d++
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

// describe is Desc followed by the value of every bar, for <desc>.
func (c *Chart) describe(format func(float64) string) string {
	var b strings.Builder
	b.WriteString(c.Desc)
	for _, p := range c.Panels {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		if p.Title != "" {
			b.WriteString(p.Title + ": ")
		}
		var groups []string
		for _, g := range p.Groups {
			var bars []string
			for i, bar := range g.Bars {
				if !bar.Missing {
					bars = append(bars, fmt.Sprintf("%s %s %s", c.Series[i].Name, format(bar.Value), p.Unit))
				}
			}
			label := ""
			if g.Label != "" {
				label = g.Label + ": "
			}
			groups = append(groups, label+strings.Join(bars, ", "))
		}
		b.WriteString(strings.Join(groups, "; ") + ".")
	}
	return b.String()
}

// wrap breaks s into lines of at most n characters at spaces (a longer
// word gets a line of its own).
func wrap(s string, n int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= n:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// num writes a coordinate with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
