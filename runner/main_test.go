package runner

import (
	"os"
	"testing"

	"paddock/sandbox/launch"
)

// TestMain makes this test binary the launcher the Executor binds into
// the confined jobs of these tests (its default: the process's own
// executable), as paddock's main does.
func TestMain(m *testing.M) {
	launch.Dispatch()
	os.Exit(m.Run())
}
