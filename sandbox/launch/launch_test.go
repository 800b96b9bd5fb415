package launch

import (
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/stretchr/testify/require"
)

// TestArgsParse: what Args writes, Parse reads back, paths and argv
// elements that look like options included.
func TestArgsParse(t *testing.T) {
	t.Parallel()
	for _, s := range []Spec{
		{ReportFD: -1, Argv: []string{"true"}},
		{LandlockABI: 7, WritableDirs: []string{"/w s", "/tmp"}, WritableFiles: []string{"/dev/null"}, UnixSockets: true, Seccomp: true,
			ReportFD: 5, Argv: []string{"sh", "-c", "x", "--", "--dir", "/"}},
		{LandlockABI: 1, WritableDirs: []string{"/--landlock"}, ReportFD: 0, Argv: []string{"--"}},
	} {
		got, err := Parse(s.Args())
		require.NoError(t, err, s.Args())
		require.Equal(t, s, got)
	}
}

// TestParseRefuses: anything but what Args writes is an error naming the
// argument, never a guess.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for args, want := range map[string][]string{
		"the first argument is not":           {"launch"},
		"no -- before the command":            {Command, "--landlock", "3"},
		"no command after --":                 {Command, "--"},
		`--landlock "0": want 1 to 11`:        {Command, "--landlock", "0", "--", "x"},
		`--landlock "12"`:                     {Command, "--landlock", "12", "--", "x"},
		`--dir "tmp" is not an absolute path`: {Command, "--dir", "tmp", "--", "x"},
		`--report "-1" is not a descriptor`:   {Command, "--report", "-1", "--", "x"},
		`unknown argument "--write"`:          {Command, "--write", "/x", "--", "x"},
		"--file needs a value":                {Command, "--file"},
	} {
		_, err := Parse(want)
		require.ErrorContains(t, err, args, "%q", want)
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
