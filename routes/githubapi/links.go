package githubapi

import (
	"net/http"
	"strings"
)

// linkPath is the path a Link header's link within the upstream gets
// (routes.Forwarder.RewriteLinks): GitHub writes its pages of a
// repository's lists as /repositories/ID/TAIL, which names no repository
// the policy can be asked about, so a link to the same TAIL as the
// client's own /repos/OWNER/NAME/TAIL gets the client's path, and only its
// query (the page) changes. Any other link keeps its path, and is checked
// like any request when the client follows it.
func linkPath(in *http.Request, path string) string {
	after, ok := strings.CutPrefix(path, rest+"repositories/")
	if !ok {
		return path
	}
	_, tail, ok := strings.Cut(after, "/")
	segs := strings.Split(strings.TrimPrefix(in.URL.Path, rest), "/")
	if ok && len(segs) > 3 && segs[0] == "repos" && strings.Join(segs[3:], "/") == tail {
		return in.URL.Path
	}
	return path
}
