package gqlpolicy_test

import (
	"fmt"

	"github.com/cproxy/cproxy/routes/githubapi/gqlpolicy"
)

// A mutation behind an alias, its input in a variable: Analyze returns the
// mutation's real name and the input as sent, for the route to check.
func ExampleAnalyze() {
	body := []byte(`{
		"query": "mutation Open($in: MergePullRequestInput!) { open: mergePullRequest(input: $in) { clientMutationId } }",
		"variables": {"in": {"pullRequestId": "PR_kwDOAcme"}},
		"operationName": "Open"
	}`)
	ops, err := gqlpolicy.Analyze(body)
	if err != nil {
		fmt.Println("cproxy:", err)
		return
	}
	for _, m := range ops[0].Mutations {
		fmt.Println(ops[0].Kind, m.Name, m.Input["pullRequestId"])
	}
	fmt.Println("nodes:", ops[0].Nodes)

	_, err = gqlpolicy.Analyze([]byte(`{"query": "{ ...a } fragment a on Query { viewer { ...a } }"}`))
	fmt.Println("cproxy:", err)
	// Output:
	// mutation mergePullRequest PR_kwDOAcme
	// nodes: [PR_kwDOAcme]
	// cproxy: invalid graphql request: the fragment a spreads itself
}
