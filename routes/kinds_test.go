package routes_test

import (
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/model"
)

// The core's tests serve the model route (routes.TestKinds): it is added
// from here, a package that may import both.
func init() { routes.TestKinds = append([]routes.Kind{model.Kind}, routes.TestKinds...) }
