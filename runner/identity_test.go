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

// A worker name tells whether it was made on this host since it booted.
func TestWorkerOnThisHost(t *testing.T) {
	here := NewWorkerID("")
	parts := strings.Split(here, ":")
	for _, c := range []struct {
		id   string
		want bool
	}{
		{here, true},
		{NewWorkerID("run"), true},
		{"x" + here, false}, // another host name
		{parts[0] + ":" + parts[1] + ":0000000z:" + parts[3], false}, // another boot
		{parts[0] + ":" + parts[1] + ":" + parts[2], false},          // not a worker name
		{"", false},
	} {
		require.Equal(t, c.want, WorkerOnThisHost(c.id), c.id)
	}
}
