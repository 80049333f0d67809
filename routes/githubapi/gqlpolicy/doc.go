// Package gqlpolicy reads a request to GitHub's GraphQL endpoint
// (/api/graphql) and says what it reaches, for the route that serves the
// endpoint to ask the policy. It does no HTTP and decides nothing itself
// beyond refusing what it cannot read: the route allows or refuses what
// Analyze returns. It is cproxy's implementation, not an API.
//
// # What is read
//
// The body is one JSON object {"query": "…", "variables": {…},
// "operationName": "…"} or a JSON array of 1 to MaxBatch of them, as
// GitHub's endpoint takes it. Analyze returns one Operation per object, in
// order; one request refused refuses the whole body, its error starting
// "request N of M: ".
//
// The query is parsed by gqlparser (parser.ParseQuery) and not validated
// against a schema: GitHub's schema is large and changes, and a copy of it
// here would refuse a field gh starts sending before the route has an
// opinion on it. What a schema would tell, the route decides instead on the
// field names Analyze returns, through an allowlist; a field GitHub does
// not have fails at GitHub.
//
// Everything is decided on the fields a document selects, never on its
// operation name: gh names its operations (RepositoryInfo,
// PullRequestCreate), `gh api graphql` may send them anonymous, and a name
// says nothing of what runs.
//
// # What is returned
//
// For the operation GitHub would run (the only one, or the one operationName
// names), an Operation holds:
//
//   - Kind: KindQuery or KindMutation.
//   - Repos: every repository(owner:, name:) field at any depth, with its
//     arguments literal or variables, once each.
//   - Nodes: every ID a node(id:) or nodes(ids:) field at any depth looks
//     up, every ID another field's argument ending in Id or Ids names
//     (isRequired(pullRequestId:)), and every ID a mutation's input names: the string values of its
//     keys ending in Id and the strings of those ending in Ids, at any
//     depth of the input (clientMutationId, the client's own label, aside).
//   - Fields: the names of the top-level fields (a query's repository,
//     viewer, search, __schema; a mutation's createPullRequest).
//   - Paths: the dotted path of field names of every field read
//     ("repository.pullRequests.nodes.number"), for a route that allows
//     nested fields by an allowlist: another way to reach a repository
//     (a user's repositories, a search, resource(url:)) shows up here.
//   - Mutations: for a mutation, each top-level field in order, a name
//     repeated as often as it runs, with its input argument, variables
//     replaced by their values (the route checks repositoryId, baseRefName,
//     headRefName, pullRequestId). Nodes holds only what follows GitHub's
//     naming of IDs: a mutation that names its target otherwise (the
//     repositoryNameWithOwner of createCommitOnBranch's branch) is checked
//     by its Input, for each mutation the route allows.
//
// Names are field names, never aliases, and text is as sent (the letters'
// case of an owner too). GitHub's repository field follows a renamed or
// transferred repository unless followRenames: false is given; that
// argument is not read here, so a route that must not follow renames checks
// the answer or the argument itself. Values are strings, bools, nil, json.Number,
// []any and map[string]any, whether written inline or sent as variables.
//
// # What is seen through
//
//   - Aliases: a field is its name, whatever its alias.
//   - Fragments, named and inline, spread anywhere: they are walked in
//     place, every time they are spread. A fragment that spreads itself,
//     directly or not, is refused, as is a fragment spread but not defined
//     or defined twice.
//   - Type conditions and @include/@skip are not evaluated: every selection
//     counts as if it ran, the safe side of a condition this package would
//     otherwise have to evaluate as GitHub does. Their variables must still
//     be declared.
//   - Variables are decided on their values as sent. Each declared one is
//     checked against its type: the one sent, else its default, else null
//     where the type allows it; a required one not sent, or one of GraphQL's
//     own types (String, ID, Int, Float, Boolean, lists of them) that does
//     not fit, is refused. Another type (an enum, an input object, GitHub's
//     own scalars) is not known without the schema and is taken as sent.
//     A variable used but not declared is refused; one sent but not declared
//     is ignored, as GitHub ignores it.
//   - The same names without arguments look nothing up: a pull request's
//     repository, a connection's nodes, an edge's node.
//   - Introspection (__schema, __type) is reported in Fields like any field:
//     GitHub's schema is public, and the route's allowlist decides.
//     __typename is left out of Fields and Paths: it reads nothing.
//
// # What is refused
//
// Every error wraps ErrInvalid, ErrTooLarge or ErrRefused (for a route, a
// 400, a 413 and a 403) and says why in words the route can send back,
// prefixed "cproxy: ", in GitHub's errors[]. The words hold only the
// client's own text (a name, a parse error's token), each clipped to 80 bytes:
//
//   - ErrInvalid, a body that cannot be read as GitHub would: not JSON, not
//     UTF-8, a key that is not query, variables or operationName (keys match
//     exactly: "Query" is not "query"), the same key twice in any object of
//     the body (encoding/json keeps the last; GitHub might keep the first),
//     a query that is not a string or does not parse, several operations
//     and no operationName, an anonymous one among others, an operationName
//     that names none, a variable missing or of the wrong type, an argument
//     or input field given twice, a fragment unknown, defined twice or in a
//     cycle.
//   - ErrTooLarge, past a bound: MaxBodyBytes of body, MaxBatch requests,
//     fields nested deeper than MaxDepth, or more than MaxSelections fields,
//     spreads and inline fragments walked in one operation.
//   - ErrRefused, read but not decidable: a subscription; a repository
//     looked up without both owner and name as strings (repository(name:)
//     under an organization is refused: its owner is the enclosing field's);
//     node or nodes without string IDs; a mutation whose arguments are not
//     exactly one input object; an Id or Ids key of a mutation's input that
//     is not a string or list of strings.
package gqlpolicy
