package pypi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// FilesPrefix is where the route serves distribution files:
// FilesPrefix + PROJECT + "/" + the file's path on the files host.
const FilesPrefix = "/pypi/files/"

// Visible says whether a version of the project, with a file uploaded at
// uploaded (zero when the index gives no time), may be shown.
type Visible func(version string, uploaded time.Time) bool

// RewriteJSON filters a project's PEP 691 JSON index page for the sandbox:
// a file is kept only if its name is a distribution of project (FileOf), at
// a version vis allows, and its URL (resolved against pageURL, the page's
// own upstream URL, when it is relative) is on filesBase (the files host,
// with a path ending in "/"); its url is rewritten to FilesPrefix + project + the
// path under filesBase, fragment kept, as an absolute path that pip
// resolves against the page's own URL, userinfo and all. Every other key of
// the page and of each file is kept as the index wrote it (compacted, never
// escaped). A file without an upload-time, or with one that is not RFC
// 3339, is passed to vis with a zero time, which a minimum release age
// refuses; one whose upload-time is not a string is dropped. versions keeps only the
// versions with a file kept.
func RewriteJSON(page []byte, project string, pageURL, filesBase *url.URL, vis Visible) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(page, &doc); err != nil {
		return nil, fmt.Errorf("index page is not JSON: %w", err)
	}
	var files []map[string]json.RawMessage
	if err := json.Unmarshal(doc["files"], &files); err != nil {
		return nil, fmt.Errorf("index page's files is not a list of objects: %w", err)
	}
	kept := []map[string]json.RawMessage{}
	shown := map[string]bool{}
	for _, f := range files {
		var name, href, uploaded string
		if json.Unmarshal(f["filename"], &name) != nil || json.Unmarshal(f["url"], &href) != nil {
			continue
		}
		if raw, ok := f["upload-time"]; ok && json.Unmarshal(raw, &uploaded) != nil {
			continue
		}
		df, err := FileOf(project, name)
		if err != nil || df.Metadata {
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, uploaded) // zero when absent or unreadable: too new
		if !vis(df.Version, at) {
			continue
		}
		local, ok := localURL(df.Project, name, href, pageURL, filesBase)
		if !ok {
			continue
		}
		f["url"], _ = marshal(local)
		kept = append(kept, f)
		shown[df.Version] = true
	}
	doc["files"], _ = marshal(kept)
	if raw, ok := doc["versions"]; ok {
		var versions []string
		if err := json.Unmarshal(raw, &versions); err != nil {
			return nil, fmt.Errorf("index page's versions is not a list of strings: %w", err)
		}
		var left []string
		for _, v := range versions {
			if shown[v] {
				left = append(left, v)
			}
		}
		doc["versions"], _ = marshal(append([]string{}, left...))
	}
	return marshal(doc)
}

// marshal is json.Marshal without its HTML escaping, which would turn the
// index's ">=3.8" into "\u003e=3.8": values pass as the index wrote them,
// only compacted.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// localURL maps a file's upstream URL, resolved against pageURL, to the
// route's, if it is on filesBase and its path ends in the file's own name.
func localURL(project, name, href string, pageURL, filesBase *url.URL) (string, bool) {
	u, err := url.Parse(href)
	if err == nil && pageURL != nil {
		u = pageURL.ResolveReference(u)
	}
	if err != nil || u.Scheme != filesBase.Scheme || u.Host != filesBase.Host || u.User != nil || u.RawQuery != "" {
		return "", false
	}
	rest, ok := strings.CutPrefix(u.EscapedPath(), filesBase.EscapedPath())
	if !ok || rest == "" || strings.Contains(rest, "..") || !strings.HasSuffix(rest, "/"+url.PathEscape(name)) && rest != url.PathEscape(name) {
		return "", false
	}
	local := FilesPrefix + project + "/" + rest
	if u.Fragment != "" {
		local += "#" + u.EscapedFragment()
	}
	return local, true
}
