// Package layers holds no code: its test holds the module's packages to the
// layering docs/architecture.md draws, so an import that runs the wrong
// way (the core importing a route, the rule engine importing the HTTP
// side, anything importing the CLI) fails a test rather than a review.
package layers
