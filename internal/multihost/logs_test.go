package multihost_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/pgtest"
	"paddock/queue"
	"paddock/queue/postgres"
)

// `paddock logs` of an attempt that ran on another host prints the
// store's copy of its output, even when a file happens to be at the
// attempt's recorded path here; on the host that ran it, the file is
// read. The other host is a process with a host name of its own (a UTS
// namespace, unshare -u) and no network.
func TestLogsOfAnotherHostComeFromTheStore(t *testing.T) {
	requireNetns(t)
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	ctx := context.Background()
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	h := newHost(t, url)
	_, errOut, code := h.run("submit", h.WriteJob("one.toml", "name = \"talk\"\ncommand = [\"echo\", \"from the job\"]\n"))
	require.Equal(t, 0, code, "submit: %s", errOut)
	waitExit(t, h.startWorker(), 2*time.Minute)
	j, err := st.JobGet(ctx, "talk")
	require.NoError(t, err)
	require.Equal(t, queue.StateSucceeded, j.State)
	path := j.Attempts[0].StdoutPath
	require.NotEmpty(t, path)
	require.NoError(t, os.WriteFile(path, []byte("a file that happens to be there\n"), 0o600))

	out, errOut, code := h.run("logs", "talk")
	require.Equal(t, 0, code, "logs: %s", errOut)
	require.Equal(t, "a file that happens to be there\n", out, "the host that ran it reads its file")

	c := h.cmd(context.Background(), "logs", "talk")
	// unshare -n paddock … becomes unshare -u -n sh -c 'hostname …; exec paddock …'.
	sh := []string{"sh", "-c", `hostname paddock-elsewhere && exec "$@"`, "sh"}
	c.Args = append(append([]string{"unshare", "-u", "-n", "--"}, sh...), c.Args[3:]...)
	outB, err := c.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "logs from another host: %s", stderr)
	require.Equal(t, "from the job\n", string(outB))

	// show says where the output is when the file is not on this host.
	require.NoError(t, os.Remove(path))
	c = h.cmd(context.Background(), "show", "talk")
	c.Args = append(append([]string{"unshare", "-u", "-n", "--"}, sh...), c.Args[3:]...)
	outB, err = c.Output()
	require.NoError(t, err, "show from another host")
	require.Contains(t, string(outB), "stdout   (not on this host: it ran on ")
	require.Contains(t, string(outB), "paddock logs reads the store's copy")
	require.NotContains(t, string(outB), "nothing written")
}
