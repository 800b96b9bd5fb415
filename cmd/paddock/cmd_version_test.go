package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// `paddock version` and `paddock --version` say the same line, from the
// binary's build information; --json gives it as an object.
func TestVersion(t *testing.T) {
	t.Parallel()
	out := func(args ...string) string {
		gopts := &GlobalOptions{}
		root := newRootCommand(gopts)
		var b bytes.Buffer
		root.SetOut(&b)
		root.SetArgs(args)
		require.NoError(t, root.Execute())
		return b.String()
	}
	line := out("version")
	require.Equal(t, line, out("--version"))
	require.Regexp(t, `^paddock \S+ .*`+runtime.Version()+` `+runtime.GOOS+`/`+runtime.GOARCH+"\n$", line)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(out("--json", "version")), &v))
	require.Equal(t, "version", v.MessageType)
	require.Equal(t, runtime.Version(), v.GoVersion)
	require.NotEmpty(t, v.Version)
	require.Equal(t, line, v.String()+"\n")
}
