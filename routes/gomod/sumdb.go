package gomod

import (
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
)

// SumDBs are the checksum databases the route proxies, by name, to the
// same upstream under /sumdb/NAME/ (the proxy protocol's "proxying a
// checksum database"): go, whose GOSUMDB names one of them, asks
// $GOPROXY/sumdb/NAME/supported, and on a 200 reads the database through
// the proxy alone. proxy.golang.org serves sum.golang.org's, so go's
// default GOSUMDB works unchanged. Any other name is refused with a 403,
// which go takes as the database being unavailable, not as a reason to
// connect to it directly.
var SumDBs = []string{"sum.golang.org"}

// sumRequest is one checksum database request, checked.
type sumRequest struct {
	db string // the database's name
	// op is the path under /sumdb/NAME/ as go sends it: "supported",
	// "latest", "lookup/ESCMOD@ESCVER", "tile/H/L/N[.p/W]".
	op string
	// module is a lookup's module path, decoded; empty for the rest.
	module string
}

// parseSumDB reads rest, "sumdb/NAME/OP" as the request path under the
// prefix with its percent-encoding undone. Only what go's checksum
// database client sends is accepted, each part checked and spelt as go
// spells it: the endpoints supported and latest, a lookup of a valid
// module path at a canonical version, and a tile coordinate that
// golang.org/x/mod/sumdb/tlog reads back to the same path.
func parseSumDB(rest string) (sumRequest, error) {
	if len(rest) > maxPathBytes {
		return sumRequest{}, ErrPath
	}
	rest = strings.TrimPrefix(rest, "sumdb/")
	for _, db := range SumDBs {
		op, ok := strings.CutPrefix(rest, db+"/")
		if !ok {
			continue
		}
		r := sumRequest{db: db, op: op}
		switch {
		case op == "supported", op == "latest":
			return r, nil
		case strings.HasPrefix(op, "lookup/"):
			escMod, escVer, ok := strings.Cut(strings.TrimPrefix(op, "lookup/"), "@")
			if !ok {
				return sumRequest{}, ErrPath
			}
			mod, err1 := module.UnescapePath(escMod)
			v, err2 := module.UnescapeVersion(escVer)
			if err1 != nil || err2 != nil || module.Check(mod, v) != nil {
				return sumRequest{}, ErrPath
			}
			if base := strings.TrimSuffix(v, "+incompatible"); semver.Canonical(base) != base {
				return sumRequest{}, ErrPath
			}
			if e1, _ := module.EscapePath(mod); e1 != escMod {
				return sumRequest{}, ErrPath
			}
			if e2, _ := module.EscapeVersion(v); e2 != escVer {
				return sumRequest{}, ErrPath
			}
			r.module = mod
			return r, nil
		case strings.HasPrefix(op, "tile/"):
			t, err := tlog.ParseTilePath(op)
			if err != nil || t.Path() != op {
				return sumRequest{}, ErrPath
			}
			return r, nil
		}
		return sumRequest{}, ErrPath
	}
	return sumRequest{}, errUnknownDB
}

// errUnknownDB is a checksum database the route does not proxy.
var errUnknownDB = routes.Refuse(routes.ErrForbidden, "unknown checksum database")

// serveSumDB serves a checksum database request. A lookup names a module:
// the profile must allow it (go.modules; its versions are checked when go
// fetches them). The rest (supported, latest, tiles) tell nothing of a
// module and are served to any profile that allows some module.
func (s *route) serveSumDB(a *routes.Call, rest string) {
	sr, err := parseSumDB(rest)
	switch {
	case err == errUnknownDB:
		a.Fail(routes.Refuse(routes.ErrForbidden, "cproxy proxies the checksum database %s only; set GOSUMDB to it (the default), or ask the operator about private modules (GONOSUMDB)", strings.Join(SumDBs, ", ")))
		return
	case err != nil:
		a.Fail(routes.Refuse(routes.ErrForbidden, "%q is not a checksum database request cproxy serves (supported, latest, lookup/MODULE@VERSION, tile/…)", routes.Clip(rest, 128)))
		return
	}
	a.SetTarget("sumdb/" + sr.db)
	sandbox := a.Session().Sandbox
	decide := func(prof *policy.Profile) (string, error) {
		if sr.module != "" {
			d := prof.GoModule(sr.module)
			if !d.Allow {
				return d.Rule, moduleNotAllowed(sr.module, sandbox, prof)
			}
			return d.Rule, nil
		}
		if prof == nil || len(prof.Go.Modules) == 0 {
			return "", routes.RefuseCode(routes.ErrForbidden, routes.CodePackageNotAllowed, "Go modules are not allowed for sandbox %s (its profile has no go.modules)", sandbox)
		}
		return prof.Key() + ".go.modules", nil
	}
	if sr.module != "" {
		a.SetTarget(sr.module)
	}
	if err := a.Decide(decide); err != nil {
		a.Fail(err)
		return
	}
	s.forward(a, served{sumdb: true}, routes.Target{Path: "/sumdb/" + sr.db + "/" + sr.op})
}
