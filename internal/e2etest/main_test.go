package e2etest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The reliability suites: crash (crash_test.go), escape (escape_test.go)
// and bad input (badinput_test.go), through the real binary. The long
// variants run with PADDOCK_SOAK=1 (make soak).

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	if hostileDir != "" {
		os.RemoveAll(hostileDir)
	}
	os.Exit(code)
}

// soak reports whether the long variants should run.
func soak() bool { return os.Getenv("PADDOCK_SOAK") == "1" }

func randomToken(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
