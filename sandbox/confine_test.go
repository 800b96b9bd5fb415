package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mkdirs creates dir names under a fresh temp dir and returns the canonical
// temp dir.
func mkdirs(t *testing.T, names ...string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	for _, n := range names {
		require.NoError(t, os.MkdirAll(filepath.Join(root, n), 0o755))
	}
	return root
}

func TestConfineArgvShapes(t *testing.T) {
	t.Parallel()
	root := mkdirs(t, "ws/sub", "extra")
	ws := filepath.Join(root, "ws")
	extra := filepath.Join(root, "extra")
	sub := filepath.Join(ws, "sub")

	head := func(disableUserns, network bool) []string {
		a := []string{"/usr/bin/bwrap", "--unshare-user"}
		if disableUserns {
			a = append(a, "--disable-userns")
		}
		a = append(a, "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc")
		if !network {
			a = append(a, "--unshare-net")
		}
		return append(a, "--die-with-parent", "--new-session", "--json-status-fd", "3", "--ro-bind", "/", "/")
	}
	fullBase := []string{"--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc"}
	partialBase := []string{
		"--dev-bind", "/dev/null", "/dev/null",
		"--dev-bind", "/dev/zero", "/dev/zero",
		"--dev-bind", "/dev/full", "/dev/full",
		"--dev-bind", "/dev/random", "/dev/random",
		"--dev-bind", "/dev/urandom", "/dev/urandom",
		"--tmpfs", "/proc", "--remount-ro", "/proc",
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	argv := []string{"sh", "-c", "echo hi"}

	cases := []struct {
		name    string
		params  PolicyParams
		grade   Grade
		disable bool
		want    []string
	}{
		{"full/read_only", PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true}, GradeFull, true,
			cat(head(true, true), fullBase, []string{"--tmpfs", "/tmp", "--ro-bind", ws, ws, "--chdir", ws, "--"}, argv)},
		{"partial/read_only", PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true}, GradePartial, true,
			cat(head(true, true), partialBase, []string{"--tmpfs", "/tmp", "--ro-bind", ws, ws, "--chdir", ws, "--"}, argv)},
		{"full/workspace_write", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true}, GradeFull, true,
			cat(head(true, true), fullBase, []string{"--tmpfs", "/tmp", "--bind", ws, ws, "--chdir", ws, "--"}, argv)},
		{"partial/workspace_write", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true}, GradePartial, true,
			cat(head(true, true), partialBase, []string{"--tmpfs", "/tmp", "--bind", ws, ws, "--chdir", ws, "--"}, argv)},
		{"full/workspace_write/writable+cwd+nonet", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Cwd: sub, Writable: []string{extra, extra, ws}}, GradeFull, true,
			cat(head(true, false), fullBase, []string{"--tmpfs", "/tmp", "--bind", ws, ws, "--bind", extra, extra, "--chdir", sub, "--"}, argv)},
		{"partial/workspace_write/writable+nonet", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Writable: []string{extra}}, GradePartial, true,
			cat(head(true, false), partialBase, []string{"--tmpfs", "/tmp", "--bind", ws, ws, "--bind", extra, extra, "--chdir", ws, "--"}, argv)},
		{"full/read_only/old-bwrap-no-disable-userns", PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true}, GradeFull, false,
			cat(head(false, true), fullBase, []string{"--tmpfs", "/tmp", "--ro-bind", ws, ws, "--chdir", ws, "--"}, argv)},
		{"full/danger_full_access", PolicyParams{Mode: ModeDangerFullAccess, Workspace: ws, Network: true}, GradeFull, true, argv},
		{"partial/danger_full_access", PolicyParams{Mode: ModeDangerFullAccess, Network: true}, GradePartial, true, argv},
	}
	for _, tc := range cases {
		for _, isRoot := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/root=%v", tc.name, isRoot), func(t *testing.T) {
				t.Parallel()
				p, err := NewPolicy(tc.params)
				require.NoError(t, err)
				d := Discovery{Executable: "/usr/bin/bwrap", Grade: tc.grade, NetworkIsolation: true, DisableUserns: tc.disable, Root: isRoot}
				got, err := ConfineWith(argv, p, d)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				// The result never aliases the input.
				got[len(got)-1] = "changed"
				require.Equal(t, "echo hi", argv[2])
			})
		}
	}
}

func TestConfineRefuses(t *testing.T) {
	t.Parallel()
	ws := mkdirs(t)
	ro, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true})
	require.NoError(t, err)
	nonet, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: ws})
	require.NoError(t, err)
	danger, err := NewPolicy(PolicyParams{Mode: ModeDangerFullAccess, Network: true})
	require.NoError(t, err)
	good := Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true}

	_, err = ConfineWith(nil, ro, good)
	require.ErrorContains(t, err, "empty argv")
	_, err = ConfineWith([]string{"true"}, Policy{}, good)
	require.ErrorContains(t, err, "NewPolicy")
	for _, d := range []Discovery{
		{Executable: "/usr/bin/bwrap", Grade: GradeUnusable},
		{Executable: "/usr/bin/bwrap"},
		{Executable: "bwrap", Grade: GradeFull},
		{Grade: GradePartial},
	} {
		_, err = ConfineWith([]string{"true"}, ro, d)
		require.ErrorIs(t, err, ErrUnusable, "%+v", d)
		// danger_full_access needs no bwrap at all.
		got, err := ConfineWith([]string{"true"}, danger, d)
		require.NoError(t, err)
		require.Equal(t, []string{"true"}, got)
	}
	_, err = ConfineWith([]string{"true"}, nonet, Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull})
	require.ErrorIs(t, err, ErrNoNetworkIsolation)
}

func TestConfineUsesDiscovered(t *testing.T) {
	// Not parallel with probing tests by design: it only reads.
	ws := mkdirs(t)
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
	require.NoError(t, err)
	a, err := Confine([]string{"true"}, p)
	require.NoError(t, err)
	b, err := ConfineWith([]string{"true"}, p, Discovered())
	require.NoError(t, err)
	require.Equal(t, b, a)
	require.True(t, filepath.IsAbs(a[0]))
}

func TestDiscoveredDefaults(t *testing.T) {
	if probed.Load() != nil {
		return // a probe already succeeded in this process; defaults are gone by design
	}
	require.Equal(t, Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true, DisableUserns: true}, Discovered())
}

func TestNewPolicy(t *testing.T) {
	t.Parallel()
	root := mkdirs(t, "real/sub", "other")
	real := filepath.Join(root, "real")
	require.NoError(t, os.Symlink(real, filepath.Join(root, "link")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o644))

	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: filepath.Join(root, "link"), Network: true})
	require.NoError(t, err)
	require.Equal(t, real, p.Workspace(), "symlinks resolved")
	require.Equal(t, real, p.Cwd(), "cwd defaults to the workspace")
	p, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: filepath.Join(root, "link"), Cwd: filepath.Join(root, "link"), Network: true})
	require.NoError(t, err)
	require.Equal(t, real, p.Cwd(), "a cwd given as the workspace is the canonical workspace")
	p, err = NewPolicy(PolicyParams{Mode: ModeDangerFullAccess, Network: true})
	require.NoError(t, err)
	require.Empty(t, p.Cwd(), "no workspace and no cwd: the caller's own")

	t.Run("relative", func(t *testing.T) {
		wd, err := os.Getwd()
		require.NoError(t, err)
		rel, err := filepath.Rel(wd, real)
		require.NoError(t, err)
		p, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: rel, Network: true})
		require.NoError(t, err)
		require.Equal(t, real, p.Workspace())
	})

	bad := []struct {
		name   string
		params PolicyParams
		want   string
	}{
		{"no mode", PolicyParams{Workspace: real}, "unknown mode"},
		{"bad mode", PolicyParams{Mode: "rw", Workspace: real}, `unknown mode "rw" (valid: read_only, workspace_write, danger_full_access)`},
		{"no workspace", PolicyParams{Mode: ModeWorkspaceWrite}, "needs a workspace"},
		{"missing", PolicyParams{Mode: ModeReadOnly, Workspace: filepath.Join(root, "nope")}, "does not exist"},
		{"file", PolicyParams{Mode: ModeReadOnly, Workspace: filepath.Join(root, "file")}, "not a directory"},
		{"slash", PolicyParams{Mode: ModeReadOnly, Workspace: "/"}, "root directory"},
		{"slash via dots", PolicyParams{Mode: ModeReadOnly, Workspace: "/usr/.."}, "root directory"},
		{"nul", PolicyParams{Mode: ModeReadOnly, Workspace: real + "\x00x"}, "NUL byte"},
		{"system dir", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: "/etc"}, "system directory"},
		{"proc", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: "/proc/self"}, "/proc"},
		{"writable slash", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: real, Writable: []string{"/"}}, "whole system"},
		{"writable usr", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: real, Writable: []string{"/usr"}}, "system directory"},
		{"writable sys", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: real, Writable: []string{"/sys/fs"}}, "/sys"},
		{"writable missing", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: real, Writable: []string{filepath.Join(root, "nope")}}, "does not exist"},
		{"writable read_only", PolicyParams{Mode: ModeReadOnly, Workspace: real, Writable: []string{filepath.Join(root, "other")}}, "need mode workspace_write"},
		{"cwd under tmp outside", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: filepath.Join(root, "other"), Cwd: real}, "fresh tmpfs"},
		{"cwd missing", PolicyParams{Mode: ModeWorkspaceWrite, Workspace: real, Cwd: filepath.Join(real, "nope")}, "does not exist"},
		{"cwd proc", PolicyParams{Mode: ModeReadOnly, Workspace: real, Cwd: "/proc"}, "/proc"},
		{"cwd dev", PolicyParams{Mode: ModeReadOnly, Workspace: real, Cwd: "/dev"}, "/dev"},
		{"danger nonet", PolicyParams{Mode: ModeDangerFullAccess}, "network = false"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewPolicy(tc.params)
			require.ErrorContains(t, err, tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "sandbox: "), err.Error())
		})
	}

	// A cwd under /tmp is fine inside the workspace or a writable root.
	p, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: filepath.Join(root, "other"), Writable: []string{real}, Cwd: filepath.Join(real, "sub")})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(real, "sub"), p.Cwd())
	// Outside /tmp, a read-only cwd is visible at every grade.
	p, err = NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: real, Cwd: "/usr", Network: true})
	require.NoError(t, err)
	require.Equal(t, "/usr", p.Cwd())
	_, err = NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: filepath.Join(root, "nope")})
	require.ErrorIs(t, err, ErrBadPath)
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, m := range Modes() {
		got, err := ParseMode(string(m))
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := ParseMode("READ_ONLY")
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrBadPath))
}

// BenchmarkConfine measures the pure argv builder (target: a few µs).
func BenchmarkConfine(b *testing.B) {
	root, err := filepath.EvalSymlinks(b.TempDir())
	require.NoError(b, err)
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: root, Writable: []string{"/var/tmp"}, Network: true})
	require.NoError(b, err)
	argv := []string{"make", "-j4", "test"}
	d := Discovery{Executable: "/usr/bin/bwrap", Grade: GradePartial, NetworkIsolation: true, DisableUserns: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ConfineWith(argv, p, d); err != nil {
			b.Fatal(err)
		}
	}
}
