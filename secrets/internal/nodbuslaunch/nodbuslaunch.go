// Package nodbuslaunch keeps github.com/99designs/keyring from starting a
// D-Bus daemon every time cproxy runs.
//
// On Linux the keyring's Secret Service and KWallet backends connect to the
// session bus from their package init, and the godbus version they use runs
// dbus-launch when it finds no bus: that starts a dbus-daemon which outlives
// cproxy, one per invocation (99designs/keyring#103, godbus/dbus#268). A bus
// started that way holds no keyring anyone unlocked, so it is of no use to
// cproxy either.
//
// This package's init runs first (the Go spec initializes packages in import
// path order among those whose imports are ready, and this path sorts before
// github.com/godbus/dbus, which imports more). When there is no session bus
// to find, it points DBUS_SESSION_BUS_ADDRESS at an address godbus refuses at
// once; Restore puts the variable back, after the keyring's init has run, so
// commands cproxy starts see the environment cproxy was given.
package nodbuslaunch

import "os"

const busVar = "DBUS_SESSION_BUS_ADDRESS"

// noBus is an address with no transport: godbus fails on it without
// starting anything.
const noBus = "cproxy-no-session-bus:"

var (
	blocked  bool   // init found no bus and set busVar
	restored bool   // Restore has run
	had      bool   // busVar was set before
	old      string // and its value
)

func init() {
	v, ok := os.LookupEnv(busVar)
	if (v != "" && v != "autolaunch:") || runtimeBus() {
		return // godbus finds a bus without launching one
	}
	had, old = ok, v
	os.Setenv(busVar, noBus)
	blocked = true
}

// runtimeBus reports whether godbus would find the session bus of a
// logged-in user where it looks: /run/user/UID/bus or dbus-session.
func runtimeBus() bool {
	dir := "/run/user/" + itoa(os.Getuid())
	for _, name := range []string{"/bus", "/dbus-session"} {
		if _, err := os.Stat(dir + name); err == nil {
			return true
		}
	}
	return false
}

// itoa avoids importing strconv, so that this package needs nothing that
// godbus does not need first.
func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// Restore undoes what init did to DBUS_SESSION_BUS_ADDRESS. The secrets
// package calls it from its own init, which runs after the keyring's.
func Restore() {
	if !blocked || restored || os.Getenv(busVar) != noBus {
		return
	}
	restored = true
	if had {
		os.Setenv(busVar, old)
	} else {
		os.Unsetenv(busVar)
	}
}

// Active reports whether init found no session bus and kept godbus from
// launching one; the keyring's D-Bus backends are then unavailable.
func Active() bool { return blocked }
