package e2etest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/sandbox/launch"
)

// The reliability suites: crash (crash_test.go), escape (escape_test.go)
// and bad input (badinput_test.go), through the real binary. The long
// variants run with PADDOCK_SOAK=1 (make soak).

func TestMain(m *testing.M) {
	// The probe ([RequireBwrap]) checks the Landlock layer with this test
	// binary as the launcher.
	launch.Dispatch()
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	Cleanup()
	if hostileDir != "" {
		os.RemoveAll(hostileDir)
	}
	os.Exit(code)
}

// cleanups run once every test is done (files shared by the tests of
// this binary).
var cleanups []func()

// soak reports whether the long variants should run.
func soak() bool { return os.Getenv("PADDOCK_SOAK") == "1" }

func randomToken(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
