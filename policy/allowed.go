package policy

import (
	"slices"
	"strings"
)

// What a profile allows, as lists a refusal names to say what would be
// allowed (docs/refusals.md). They hold the profile's own globs as written,
// never anything of another profile.

// AllowedRepos are the globs of the profile's repos entries, of those with
// push access only when push is set.
func (pr *Profile) AllowedRepos(push bool) []string {
	if pr == nil {
		return nil
	}
	var out []string
	for _, r := range pr.Repos {
		if (!push || r.Access == AccessPush) && !slices.Contains(out, r.Repo) {
			out = append(out, r.Repo)
		}
	}
	return out
}

// AllowedRefs are the refs globs of the profile's push entries for the
// repository ownerName, tags only (refs/tags/…) when tag is set, and only
// of entries that allow deleting when del is set: what a push of such an
// update could name.
func (pr *Profile) AllowedRefs(ownerName string, tag, del bool) []string {
	return pr.repoLists(ownerName, func(r RepoRule) []string {
		if r.Access != AccessPush || tag && !r.Tags || del && !r.Delete {
			return nil
		}
		return r.Refs
	})
}

// AllowedAPI are the API permissions ("read", "pulls:create") the
// profile's repos entries for the repository ownerName give.
func (pr *Profile) AllowedAPI(ownerName string) []string {
	return pr.repoLists(ownerName, func(r RepoRule) []string { return r.API })
}

// AllowedPRBases are the pr_bases globs the profile's repos entries for
// the repository ownerName give.
func (pr *Profile) AllowedPRBases(ownerName string) []string {
	return pr.repoLists(ownerName, func(r RepoRule) []string { return r.PRBases })
}

// repoLists is the union of list of every repos entry matching ownerName.
func (pr *Profile) repoLists(ownerName string, list func(RepoRule) []string) []string {
	if pr == nil {
		return nil
	}
	name, ok := repoName(ownerName)
	if !ok {
		return nil
	}
	var out []string
	for _, r := range pr.Repos {
		if !matchGlob(strings.ToLower(r.Repo), name) {
			continue
		}
		for _, g := range list(r) {
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}
