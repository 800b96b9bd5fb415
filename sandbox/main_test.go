package sandbox

import (
	"os"
	"testing"

	"paddock/sandbox/launch"
)

// testCleanups run after every test, before the test binary exits.
var testCleanups []func()

// TestMain makes this test binary the launcher of the confined jobs its
// tests run ([OpenLauncher] opens it), as paddock's main does.
func TestMain(m *testing.M) {
	launch.Dispatch()
	if len(os.Args) > 1 && os.Args[1] == syscallProbeArg {
		syscallProbe()
	}
	if len(os.Args) > 1 && os.Args[1] == openLauncherArg {
		openLauncherProbe()
	}
	code := m.Run()
	for _, f := range testCleanups {
		f()
	}
	os.Exit(code)
}
