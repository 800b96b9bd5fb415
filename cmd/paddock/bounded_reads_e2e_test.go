package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
	"paddock/jobspec"
)

// TestE2EBoundedReads: every file a user names (a policy, a config, a
// hook module, a cases file, a request, a job file on stdin) is read with
// a type check and a size cap: /dev/zero is refused unread, and an
// endless stdin stops at the cap, each with exit 2 and a message naming
// it. Before, each of these read until the machine ran out of memory.
func TestE2EBoundedReads(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	minimal := filepath.Join(t.TempDir(), "m.wasm")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "set", "/dev/zero"}, "/dev/zero is a character device; a policy file is a regular file or a pipe"},
		{[]string{"hook", "test", "/dev/zero", "--", "true"}, "/dev/zero is not a regular file"},
		{[]string{"hook", "test", minimal, "--cases", "/dev/zero"}, "/dev/zero is a character device; a cases file is a regular file or a pipe"},
		{[]string{"hook", "test", minimal, "--request", "/dev/zero"}, "/dev/zero is a character device; a request is a regular file or a pipe"},
	} {
		_, errOut, code := b.Run(c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, c.args)
	}
	cmd := exec.CommandContext(context.Background(), b.Bin, "--state-dir", b.State, "--config", "/dev/zero", "ls")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Equal(t, 2, cmd.ProcessState.ExitCode(), string(out))
	require.Contains(t, string(out), "a config file is a regular file or a pipe")

	// An endless job file on stdin stops at the job-file cap.
	submit := b.Cmd(context.Background(), "submit", "-")
	submit.Stdin = bytes.NewReader(bytes.Repeat([]byte("a"), jobspec.MaxFileBytes+10))
	var errOut strings.Builder
	submit.Stderr = &errOut
	require.Error(t, submit.Run())
	require.Equal(t, 2, submit.ProcessState.ExitCode(), errOut.String())
	require.Contains(t, errOut.String(), "standard input is larger than")
	require.Empty(t, b.List(), "nothing was enqueued")
}

// TestE2ECancelRetryAllOrNothing: cancel and retry look every job up
// first; one unknown name is bad input (exit 2) and changes none of the
// jobs named with it.
func TestE2ECancelRetryAllOrNothing(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	id := b.Submit(b.WriteJob("q.toml", "name = \"q1\"\nmode = \"read_only\"\ncommand = \"true\"\n"))[0]
	for _, verb := range []string{"cancel", "retry"} {
		_, errOut, code := b.Run(verb, "q1", "nosuchjob")
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, "nothing was done")
		require.Equal(t, "queued", b.Show(id).State, "%s changed a job although another was unknown", verb)
	}
	_, errOut, code := b.Run("cancel", "q1")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "canceled", b.Show(id).State)
}
