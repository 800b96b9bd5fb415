// Package testenv holds the one rule every test that needs something of
// its host follows: bwrap, root, a kernel feature, a tool, a PostgreSQL
// server. Such a test skips where that thing is missing, except under
// PADDOCK_REQUIRE_BWRAP=1 (CI, as root), where it fails: a skipped
// security test is a hole. It imports nothing of paddock, so any test may
// use it.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// RequireEnv is the variable that turns skips into failures.
const RequireEnv = "PADDOCK_REQUIRE_BWRAP"

// Required reports whether the environment requires every test to run
// ($PADDOCK_REQUIRE_BWRAP=1).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Unavailable ends a test that cannot run here: it skips with the message,
// or fails with it when [Required]. format and args are fmt.Sprintf's.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		tb.Fatalf("%s, and %s=1", msg, RequireEnv)
	}
	tb.Skipf("%s (set %s=1 to fail instead)", msg, RequireEnv)
}
