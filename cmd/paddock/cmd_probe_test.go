package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/sandbox"
)

func TestProbeCommand(t *testing.T) {
	requireBwrapCmd(t)
	var out bytes.Buffer
	require.NoError(t, runProbe(context.Background(), ProbeOptions{}, &GlobalOptions{JSON: true}, &out))
	var msg map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &msg))
	require.Equal(t, "probe", msg["message_type"])
	for _, k := range []string{"grade", "layers", "seccomp", "landlock_abi", "executable", "version", "network_isolation", "error", "root", "setuid", "bwrap_line", "hint"} {
		require.Contains(t, msg, k)
	}
	require.Contains(t, []any{"full", "partial"}, msg["grade"])
	require.True(t, filepath.IsAbs(msg["executable"].(string)))
	require.Equal(t, "", msg["error"])

	out.Reset()
	require.NoError(t, runProbe(context.Background(), ProbeOptions{}, &GlobalOptions{}, &out))
	require.Contains(t, out.String(), "grade:")
	require.Contains(t, out.String(), "network isolation:")
}

// TestPrintProbeLayers: the text report lists the layers, and names a
// missing one.
func TestPrintProbeLayers(t *testing.T) {
	t.Parallel()
	whole := sandbox.ProbeReport{Grade: sandbox.GradeFull, Seccomp: true, LandlockABI: 6}
	whole.Layers = whole.Discovery().Layers()
	var out bytes.Buffer
	printProbe(&out, whole)
	require.Contains(t, out.String(), "layers:            bwrap, seccomp, landlock ABI 6\n")
	partial := sandbox.ProbeReport{Grade: sandbox.GradePartial, Seccomp: true}
	partial.Layers = partial.Discovery().Layers()
	out.Reset()
	printProbe(&out, partial)
	require.Contains(t, out.String(), "layers:            bwrap, seccomp (no landlock: see the notes)\n")
	out.Reset()
	printProbe(&out, sandbox.ProbeReport{Grade: sandbox.GradeUnusable})
	require.NotContains(t, out.String(), "layers:")
}
