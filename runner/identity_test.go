package runner

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each process start gets a name of its own: host, pid, boot id and a
// nonce, so a restarted worker with a reused pid never owns the leases of
// the one that died.
func TestNewWorkerIDUniquePerStart(t *testing.T) {
	a, b := NewWorkerID(""), NewWorkerID("")
	require.NotEqual(t, a, b)
	host, _ := os.Hostname()
	parts := strings.Split(a, ":")
	require.Len(t, parts, 4, a)
	require.Equal(t, host, parts[0])
	require.Equal(t, strconv.Itoa(os.Getpid()), parts[1])
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(strings.ReplaceAll(string(boot), "-", ""), parts[2]), "boot id %s in %s", boot, a)
	require.Len(t, parts[3], 8)
	require.True(t, strings.HasSuffix(NewWorkerID("run"), ":run"))
}
