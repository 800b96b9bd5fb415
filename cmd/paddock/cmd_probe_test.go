package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProbeCommand(t *testing.T) {
	requireBwrapCmd(t)
	var out bytes.Buffer
	require.NoError(t, runProbe(context.Background(), ProbeOptions{}, &GlobalOptions{JSON: true}, &out))
	var msg map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &msg))
	require.Equal(t, "probe", msg["message_type"])
	for _, k := range []string{"grade", "executable", "version", "network_isolation", "error", "root", "setuid", "bwrap_line", "hint"} {
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
