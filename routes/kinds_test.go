package routes_test

import (
	"net/http"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/routes/model"
)

// The core's tests serve the model route (routes.TestKinds) and the admin
// API (routes.TestAdmin): they are added from here, a package that may
// import them.
func init() {
	routes.TestKinds = append([]routes.Kind{model.Kind}, routes.TestKinds...)
	routes.TestAdmin = func(srv *routes.Server) http.Handler { return admin.Handler(srv, client.Serving{}) }
}
