package launch

import (
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/stretchr/testify/require"
)

// TestArgsParse: what Args writes, Parse reads back, paths and argv
// elements that look like options included; a Spec becomes the ruleset
// of its ABI level.
func TestArgsParse(t *testing.T) {
	t.Parallel()
	for _, v := range []Invocation{
		{ReportFD: 2, Argv: []string{"true"}},
		{Handled: 0x7fff, Scoped: 3, DirRights: 0x3fff, FileRights: 0x4002, Dirs: []string{"/w s", "/tmp"}, Files: []string{"/dev/null"},
			Seccomp: true, ReportFD: 5, Argv: []string{"sh", "-c", "x", "--", "d/x", "/"}},
		{Handled: 2, DirRights: 2, Dirs: []string{"/--"}, ReportFD: 0, Argv: []string{"--"}},
	} {
		got, err := Parse(v.Args())
		require.NoError(t, err, v.Args())
		require.Equal(t, v, got)
	}
	v := Spec{LandlockABI: 6, WritableDirs: []string{"/w"}, WritableFiles: []string{"/dev/null"}, ReportFD: -1, Argv: []string{"x"}}.Invocation()
	cfg, dirs := config(6, false)
	require.Equal(t, Invocation{Handled: uint64(cfg.HandledAccessFS), Scoped: uint64(cfg.Scoped), DirRights: uint64(dirs),
		FileRights: uint64(dirs & fileRights), Dirs: []string{"/w"}, Files: []string{"/dev/null"}, ReportFD: 2, Argv: []string{"x"}}, v)
	require.Equal(t, Invocation{ReportFD: 2, Argv: []string{"x"}}, Spec{WritableDirs: []string{"/w"}, ReportFD: -1, Argv: []string{"x"}}.Invocation(),
		"no Landlock: no rules")
}

// TestParseRefuses: anything but what Args writes is an error naming the
// argument, never a guess.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	ok := []string{Command, "2", "0", "2", "0", "1", "5"}
	with := func(i int, v string, rest ...string) []string {
		a := append([]string(nil), ok...)
		a[i] = v
		return append(a, rest...)
	}
	for want, args := range map[string][]string{
		"the first argument is not":                           {"launch"},
		"3 arguments; want at least 8":                        {Command, "2", "0"},
		"no -- before the command":                            append(ok, "d/tmp"),
		"no command after --":                                 append(ok, "--"),
		`handled "0x2" is not a lowercase hexadecimal number`: with(1, "0x2", "--", "x"),
		`scoped "A" is not a lowercase hexadecimal number`:    with(2, "A", "--", "x"),
		`flags "" is not a lowercase hexadecimal number`:      with(5, "", "--", "x"),
		`flags "3": unknown bits`:                             with(5, "3", "--", "x"),
		`report descriptor "80000000" is not a descriptor`:    with(6, "80000000", "--", "x"),
		`"dtmp" is not d or f and an absolute path`:           append(ok, "dtmp", "--", "x"),
		`"x/tmp" is not d or f and an absolute path`:          append(ok, "x/tmp", "--", "x"),
		`"d/tmp": a writable path without a Landlock ruleset`: with(1, "0", "d/tmp", "--", "x"),
	} {
		_, err := Parse(args)
		require.ErrorContains(t, err, want, "%q", args)
	}
}

// TestConfigRights: each ABI level handles only write rights (never
// reading or executing), grants the directories all of them but
// connecting to outside sockets, and lifts the socket restrictions with
// UnixSockets, not the signal scope.
func TestConfigRights(t *testing.T) {
	t.Parallel()
	for abi := 1; abi <= MaxLandlockABI; abi++ {
		for _, unix := range []bool{false, true} {
			cfg, dirs := config(abi, unix)
			require.Zero(t, uint64(cfg.HandledAccessFS)&^uint64(writeRights), "abi %d handles a right that is not a write", abi)
			require.Zero(t, cfg.HandledAccessNet, "abi %d: the network is the namespace's business", abi)
			require.Equal(t, uint64(cfg.HandledAccessFS)&^uint64(ll.AccessFSResolveUnix), uint64(dirs), "abi %d: every handled right but resolve-unix is granted below the writable set", abi)
			if abi >= 6 {
				require.NotZero(t, uint64(cfg.Scoped)&ll.ScopeSignal, "abi %d keeps the signal scope", abi)
				require.Equal(t, !unix, uint64(cfg.Scoped)&ll.ScopeAbstractUnixSocket != 0, "abi %d: the abstract socket scope", abi)
			} else {
				require.Zero(t, cfg.Scoped)
			}
			if abi >= 9 {
				require.Equal(t, !unix, uint64(cfg.HandledAccessFS)&ll.AccessFSResolveUnix != 0, "abi %d: resolve-unix", abi)
			}
		}
	}
}
