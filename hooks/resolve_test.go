package hooks

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdjustJudgedOnResolvedPaths: a hook without may_widen that narrows
// a writable root to root/out, where the job made out a symlink to a
// directory outside its roots, is widening the job and is refused; the
// same narrowing to a real subdirectory is accepted; with may_widen, and
// with no ResolvePath (text only), the adjustment goes through.
func TestAdjustJudgedOnResolvedPaths(t *testing.T) {
	t.Parallel()
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	w := filepath.Join(root, "w")
	secret := filepath.Join(root, "secret")
	require.NoError(t, os.MkdirAll(filepath.Join(w, "real"), 0o755))
	require.NoError(t, os.MkdirAll(secret, 0o755))
	require.NoError(t, os.Symlink(secret, filepath.Join(w, "out")))

	narrow := func(mayWiden bool, resolve func(string) (string, error), to string) Result {
		c := newTestChain(t, ChainOptions{
			Hooks: []Config{{Name: "narrow", Path: wasmPath(t, "hostile-reactor"), MayWiden: mayWiden,
				Settings: map[string]any{"do": "setwritable", "writable": []string{to}}}},
			ResolvePath: resolve,
		})
		j := testJob("")
		j.Labels = nil
		j.Writable = []string{w}
		res, _ := decide(t, c, j)
		return res
	}
	res := narrow(false, filepath.EvalSymlinks, filepath.Join(w, "out"))
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Contains(t, res.Reason, "resolves to \""+secret+"\", outside the job's writable roots")
	require.ErrorContains(t, errFromTrail(res), "widen")

	res = narrow(false, filepath.EvalSymlinks, filepath.Join(w, "missing"))
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Contains(t, res.Reason, "does not resolve")

	res = narrow(false, filepath.EvalSymlinks, filepath.Join(w, "real"))
	require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
	require.Equal(t, []string{filepath.Join(w, "real")}, res.Job.Writable)

	res = narrow(true, filepath.EvalSymlinks, filepath.Join(w, "out"))
	require.Equal(t, VerdictAllow, res.Verdict, "may_widen: the operator allowed it")

	res = narrow(false, nil, filepath.Join(w, "out"))
	require.Equal(t, VerdictAllow, res.Verdict, "without ResolvePath the paths are text")
}

// errFromTrail returns the last trail entry's error as an error value.
func errFromTrail(res Result) error {
	if len(res.Trail) == 0 || res.Trail[len(res.Trail)-1].Error == "" {
		return nil
	}
	return errString(res.Trail[len(res.Trail)-1].Error)
}

type errString string

func (e errString) Error() string { return string(e) }
