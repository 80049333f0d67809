package pypi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	xhtml "golang.org/x/net/html"
)

// The simple repository API's content types (PEP 691), and the plain HTML
// of PEP 503, which a client that names no other gets.
const (
	TypeJSON       = "application/vnd.pypi.simple.v1+json"
	TypeHTML       = "application/vnd.pypi.simple.v1+html"
	TypeLegacyHTML = "text/html"
)

// upstreamAccept is what the route asks an index for: JSON, which carries
// upload times (PEP 700), before HTML, which does not.
const upstreamAccept = TypeJSON + ", " + TypeHTML + ";q=0.2, " + TypeLegacyHTML + ";q=0.1"

// Negotiate picks the form of an index page for a client's Accept header,
// as PEP 691 says a server does: the offer with the highest quality, JSON
// on a tie, PEP 503 HTML (text/html) when the client sends no Accept.
// "latest" names the newest version of a form, v1 here. It returns "" when
// the client accepts none of them (406).
func Negotiate(accept string) string {
	if strings.TrimSpace(accept) == "" {
		return TypeLegacyHTML
	}
	offers := []string{TypeJSON, TypeHTML, TypeLegacyHTML}
	best, bestQ := "", 0.0
	for _, offer := range offers {
		if q := quality(accept, offer); q > bestQ {
			best, bestQ = offer, q
		}
	}
	return best
}

// quality is the q value accept gives offer: its most specific range
// (exact, then "type/*", then "*/*"), zero when none matches.
func quality(accept, offer string) float64 {
	typ, _, _ := strings.Cut(offer, "/")
	latest := strings.Replace(offer, ".v1+", ".latest+", 1)
	q, specific := 0.0, -1
	for _, part := range strings.Split(accept, ",") {
		params := strings.Split(part, ";")
		rng := strings.ToLower(strings.TrimSpace(params[0]))
		level := -1
		switch rng {
		case offer, latest:
			level = 2
		case typ + "/*":
			level = 1
		case "*/*":
			level = 0
		}
		if level < specific || level < 0 {
			continue
		}
		v := 1.0
		for _, p := range params[1:] {
			k, val, _ := strings.Cut(p, "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || f < 0 || f > 1 {
					f = 0
				}
				v = f
			}
		}
		if level > specific || v > q {
			q, specific = v, level
		}
	}
	return q
}

// ParseHTML reads a PEP 503 project page into the PEP 691 JSON form, so
// that one filter serves both: each anchor is a file, its text the file
// name, its href the url (fragment kept, relative to the page's <base> if
// it has one), the fragment's hash in hashes, and data-requires-python,
// data-yanked and data-core-metadata (or data-dist-info-metadata) as
// requires-python, yanked and core-metadata.
func ParseHTML(page []byte, project string) ([]byte, error) {
	z := xhtml.NewTokenizer(bytes.NewReader(page))
	var (
		files   []map[string]any
		base    string
		version = "1.0"
		cur     map[string]any
		text    strings.Builder
	)
	for {
		switch z.Next() {
		case xhtml.ErrorToken:
			if z.Err() != io.EOF {
				return nil, fmt.Errorf("index page is not HTML: %w", z.Err())
			}
			doc := map[string]any{"meta": map[string]string{"api-version": version}, "name": project, "files": append([]map[string]any{}, files...)}
			return marshal(doc)
		case xhtml.StartTagToken, xhtml.SelfClosingTagToken:
			t := z.Token()
			attr := map[string]string{}
			for _, a := range t.Attr {
				if _, dup := attr[a.Key]; !dup {
					attr[a.Key] = a.Val
				}
			}
			switch t.Data {
			case "base":
				if href, ok := attr["href"]; ok && base == "" {
					base = href
				}
			case "meta":
				if attr["name"] == "pypi:repository-version" && attr["content"] != "" {
					version = attr["content"]
				}
			case "a":
				href, ok := attr["href"]
				if !ok {
					continue
				}
				if base != "" {
					b, err := url.Parse(base)
					h, err2 := url.Parse(href)
					if err != nil || err2 != nil {
						continue
					}
					href = b.ResolveReference(h).String()
				}
				cur = map[string]any{"url": href, "hashes": map[string]string{}}
				if u, err := url.Parse(href); err == nil && u.Fragment != "" {
					if algo, sum, ok := strings.Cut(u.Fragment, "="); ok {
						cur["hashes"] = map[string]string{algo: sum}
					}
				}
				if rp, ok := attr["data-requires-python"]; ok {
					cur["requires-python"] = rp
				}
				if y, ok := attr["data-yanked"]; ok {
					if y == "" {
						cur["yanked"] = true
					} else {
						cur["yanked"] = y
					}
				}
				md, ok := attr["data-core-metadata"]
				if !ok {
					md, ok = attr["data-dist-info-metadata"]
				}
				if ok {
					cur["core-metadata"] = metadataValue(md)
				}
				text.Reset()
				if t.Type == xhtml.SelfClosingTagToken {
					cur = nil
				}
			}
		case xhtml.TextToken:
			if cur != nil {
				text.Write(z.Text())
			}
		case xhtml.EndTagToken:
			if name, _ := z.TagName(); string(name) == "a" && cur != nil {
				cur["filename"] = strings.TrimSpace(text.String())
				files = append(files, cur)
				cur = nil
			}
		}
	}
}

// metadataValue is data-core-metadata's value in the JSON form: true, or
// the hash it names ("sha256=…" becomes {"sha256": "…"}).
func metadataValue(v string) any {
	if algo, sum, ok := strings.Cut(v, "="); ok && algo != "" {
		return map[string]string{algo: sum}
	}
	return true
}

// pageFile is what RenderHTML reads of a file of the JSON form.
type pageFile struct {
	Filename       string            `json:"filename"`
	URL            string            `json:"url"`
	Hashes         map[string]string `json:"hashes"`
	RequiresPython *string           `json:"requires-python"`
	Yanked         json.RawMessage   `json:"yanked"`
	CoreMetadata   json.RawMessage   `json:"core-metadata"`
	DistInfo       json.RawMessage   `json:"dist-info-metadata"`
}

// RenderHTML writes a project page of the JSON form (as RewriteJSON left
// it) as PEP 503 HTML, for a client that asked for HTML: each file an
// anchor whose href is its url with its hash as the fragment (sha256 when
// it has one), and the data- attributes of PEP 503, 592, 658 and 714.
func RenderHTML(page []byte) ([]byte, error) {
	var doc struct {
		Name  string     `json:"name"`
		Files []pageFile `json:"files"`
	}
	if err := json.Unmarshal(page, &doc); err != nil {
		return nil, fmt.Errorf("index page is not JSON: %w", err)
	}
	var b bytes.Buffer
	name := html.EscapeString(doc.Name)
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Links for %s</title>\n  </head>\n  <body>\n    <h1>Links for %s</h1>\n", name, name)
	for _, f := range doc.Files {
		href := f.URL
		if !strings.Contains(href, "#") && len(f.Hashes) > 0 {
			algo := "sha256"
			if _, ok := f.Hashes[algo]; !ok {
				algo = slices.Sorted(maps.Keys(f.Hashes))[0]
			}
			href += "#" + algo + "=" + f.Hashes[algo]
		}
		fmt.Fprintf(&b, "    <a href=\"%s\"", html.EscapeString(href))
		if f.RequiresPython != nil {
			fmt.Fprintf(&b, " data-requires-python=\"%s\"", html.EscapeString(*f.RequiresPython))
		}
		md := f.CoreMetadata
		if md == nil {
			md = f.DistInfo
		}
		if v, ok := metadataAttr(md); ok {
			fmt.Fprintf(&b, " data-dist-info-metadata=\"%s\" data-core-metadata=\"%s\"", html.EscapeString(v), html.EscapeString(v))
		}
		if v, ok := yankedAttr(f.Yanked); ok {
			fmt.Fprintf(&b, " data-yanked=\"%s\"", html.EscapeString(v))
		}
		fmt.Fprintf(&b, ">%s</a><br />\n", html.EscapeString(f.Filename))
	}
	b.WriteString("  </body>\n</html>\n")
	return b.Bytes(), nil
}

// metadataAttr is a file's core-metadata as the HTML form's attribute
// value: "true", or "ALGO=HASH" (sha256 when there is one).
func metadataAttr(raw json.RawMessage) (string, bool) {
	var on bool
	if json.Unmarshal(raw, &on) == nil {
		return "true", on
	}
	var hashes map[string]string
	if json.Unmarshal(raw, &hashes) != nil || hashes == nil {
		return "", false
	}
	if len(hashes) == 0 {
		return "true", true
	}
	algo := "sha256"
	if _, ok := hashes[algo]; !ok {
		algo = slices.Sorted(maps.Keys(hashes))[0]
	}
	return algo + "=" + hashes[algo], true
}

// yankedAttr is a file's yanked value as data-yanked: the reason, or ""
// for a yank without one; false when it is not yanked.
func yankedAttr(raw json.RawMessage) (string, bool) {
	var on bool
	if json.Unmarshal(raw, &on) == nil {
		return "", on
	}
	var reason string
	if json.Unmarshal(raw, &reason) == nil {
		return reason, true
	}
	return "", false
}
