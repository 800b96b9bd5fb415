package launch

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"paddock/internal/testenv"
)

// TestMain makes this test binary the Go launcher, as paddock's main
// does.
func TestMain(m *testing.M) {
	Dispatch()
	os.Exit(m.Run())
}

// result is what one launcher run did.
type result struct {
	code   int
	stdout string
	report string // the record's message, in words (Describe)
}

// imageFile returns the image in a sealed memfd, skipping where this
// architecture has none.
func imageFile(t *testing.T) *os.File {
	t.Helper()
	img, err := Image()
	if runtime.GOARCH != "amd64" {
		require.Error(t, err)
		testenv.Unavailable(t, "no launcher image on %s", runtime.GOARCH)
	}
	require.NoError(t, err)
	fd, err := unix.MemfdCreate("paddock-launch-test", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "image")
	t.Cleanup(func() { f.Close() })
	_, err = f.Write(img)
	require.NoError(t, err)
	return f
}

// launchWith runs the launcher (the image in img, or this binary's Main
// when img is nil) on v, with env, and a pipe as v.ReportFD (3).
func launchWith(t *testing.T, img *os.File, v Invocation, env []string) result {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	v.ReportFD = 3
	prog := "/proc/self/exe"
	files := []*os.File{w}
	if img != nil {
		prog = "/proc/self/fd/4"
		files = append(files, img)
	}
	// A descriptor the job must not inherit.
	leak, err := os.Open("/dev/null")
	require.NoError(t, err)
	defer leak.Close()
	files = append(files, leak)
	cmd := exec.Command(prog, v.Args()...)
	cmd.Args[0] = "launcher"
	cmd.ExtraFiles = files
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	err = cmd.Start()
	w.Close()
	require.NoError(t, err)
	rep, _ := readAll(r)
	err = cmd.Wait()
	res := result{stdout: out.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	if len(rep) > 0 {
		var rec map[string]string
		require.NoError(t, json.Unmarshal(rep, &rec), "the report is one JSON record: %q", rep)
		msg, ok := rec[ReportKey]
		require.True(t, ok, "%q", rep)
		res.report = Describe(msg)
	}
	return res
}

func readAll(f *os.File) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}

// requireLandlock skips without Landlock, except where the environment
// requires every layer (PADDOCK_REQUIRE_BWRAP=1), where it fails.
func requireLandlock(t *testing.T) int {
	t.Helper()
	abi := LandlockABI()
	if abi == 0 {
		testenv.Unavailable(t, "no usable Landlock on this kernel")
	}
	return abi
}

// TestImageAsMain: the image and the Go launcher do the same on the same
// arguments: execvp's search, its errors and exit statuses, the Landlock
// ruleset, the seccomp check, the report and the descriptors the job
// inherits (none but the standard three).
func TestImageAsMain(t *testing.T) {
	t.Parallel()
	img := imageFile(t)
	abi := requireLandlock(t)
	dir := t.TempDir()
	nox := filepath.Join(dir, "nox")
	require.NoError(t, os.Mkdir(nox, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(nox, "true"), []byte("#!/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(nox, "plain"), []byte("#!/bin/sh\n"), 0o644))
	script := filepath.Join(dir, "script")
	require.NoError(t, os.WriteFile(script, []byte("echo script ran \"$@\"\n"), 0o755))
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(in, 0o755))
	require.NoError(t, os.Mkdir(out, 0o755))
	spec := func(s Spec) Invocation { s.LandlockABI = abi; return s.Invocation() }
	fds := "for f in 3 4 5 6 7; do [ -e /proc/self/fd/$f ] && echo open $f; done; echo end"
	for _, tc := range []struct {
		name string
		v    Invocation
		env  []string
		want result
	}{
		{"found in $PATH, empty and missing elements skipped", Invocation{Argv: []string{"sh", "-c", "echo ok"}},
			[]string{"PATH=/nonexistent::/usr/bin:/bin"}, result{stdout: "ok\n"}},
		{"no $PATH: /bin:/usr/bin", Invocation{Argv: []string{"sh", "-c", "echo ok"}}, nil, result{stdout: "ok\n"}},
		{"a name with a slash", Invocation{Argv: []string{"/bin/echo", "a b"}}, nil, result{stdout: "a b\n"}},
		{"not found", Invocation{Argv: []string{"no-such-command-here"}}, []string{"PATH=/usr/bin:/bin"},
			result{code: 127, report: "execvp no-such-command-here: no such file or directory"}},
		{"empty name", Invocation{Argv: []string{""}}, nil, result{code: 127, report: "execvp : no such file or directory"}},
		{"not executable, nothing else found", Invocation{Argv: []string{"plain"}}, []string{"PATH=" + nox + ":/usr/bin"},
			result{code: 126, report: "execvp plain: permission denied"}},
		{"not executable, then found", Invocation{Argv: []string{"true"}}, []string{"PATH=" + nox + ":/usr/bin:/bin"}, result{}},
		{"no #! line: run by /bin/sh", Invocation{Argv: []string{"script", "a"}}, []string{"PATH=" + dir},
			result{stdout: "script ran a\n"}},
		{"no #! line, by its path", Invocation{Argv: []string{script, "b"}}, nil, result{stdout: "script ran b\n"}},
		{"descriptors", Invocation{Argv: []string{"/bin/sh", "-c", fds}}, nil, result{stdout: "end\n"}},
		{"seccomp asked, none in force", Invocation{Seccomp: true, Argv: []string{"/bin/true"}}, nil,
			result{code: 126, report: "seccomp: no filter is in force"}},
		{"landlock: writes in the writable set only", spec(Spec{WritableDirs: []string{in}, WritableFiles: []string{"/dev/null"},
			Argv: []string{"/bin/sh", "-c", "echo a > " + in + "/f && echo in; echo b > /dev/null && echo null; (echo c > " + out + "/f) 2>/dev/null || echo out denied"}}), nil,
			result{stdout: "in\nnull\nout denied\n"}},
		{"landlock: a missing writable path", spec(Spec{WritableDirs: []string{"/nonexistent-dir"}, Argv: []string{"/bin/true"}}), nil,
			result{code: 126, report: "landlock: opening /nonexistent-dir: no such file or directory"}},
		{"landlock: a directory's rights on a file", Invocation{Handled: 2 | 1<<6, DirRights: 2 | 1<<6, Dirs: []string{"/dev/null"}, Argv: []string{"/bin/true"}}, nil,
			result{code: 126, report: "landlock_add_rule /dev/null: invalid argument"}},
	} {
		for _, l := range []struct {
			name string
			img  *os.File
		}{{"image", img}, {"main", nil}} {
			got := launchWith(t, l.img, tc.v, tc.env)
			require.Equal(t, tc.want, got, "%s: %s", l.name, tc.name)
		}
	}
}

// TestImageReportEscapes: a path that JSON would need escaped keeps the
// image's report one valid record (such bytes become '?').
func TestImageReportEscapes(t *testing.T) {
	t.Parallel()
	img := imageFile(t)
	requireLandlock(t)
	bad := "/nonexistent\"\\\n" + strings.Repeat("y", 3000)
	got := launchWith(t, img, Invocation{Handled: 2, DirRights: 2, Dirs: []string{bad}, Argv: []string{"/bin/true"}}, nil)
	require.Equal(t, 126, got.code)
	require.True(t, strings.HasPrefix(got.report, "landlock: opening /nonexistent???yyy"), got.report)
	// A name longer than any $PATH element can take: not found, and the
	// report cut short, still one record.
	long := strings.Repeat("x", 5000)
	got = launchWith(t, img, Invocation{Argv: []string{long}}, []string{"PATH=/usr/bin"})
	require.Equal(t, 127, got.code)
	require.True(t, strings.HasPrefix(got.report, "execvp xxx") && strings.HasSuffix(got.report, "x: no such file or directory"), "%.80s", got.report)
}

// TestImageBadArguments: arguments the image cannot read stop it before
// anything runs.
func TestImageBadArguments(t *testing.T) {
	t.Parallel()
	img := imageFile(t)
	for _, args := range [][]string{
		{Command},
		{Command, "2", "0", "2", "0", "0", "3", "--"},
		{Command, "g", "0", "0", "0", "0", "3", "--", "/bin/true"},
		{Command, "0", "0", "0", "0", "0", "3", "d/tmp", "--", "/bin/true"},
		{Command, "2", "0", "2", "0", "0", "3", "x/tmp", "--", "/bin/true"},
		{Command, "2", "0", "2", "0", "0", "3", "d/tmp", "/bin/true"},
		{Command, "11111111111111111", "0", "0", "0", "0", "3", "--", "/bin/true"},
	} {
		_, perr := Parse(args)
		require.Error(t, perr, "%q", args)
		cmd := exec.Command("/proc/self/fd/3", args...)
		cmd.ExtraFiles = []*os.File{img}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%q: %v %s", args, err, out)
		require.Equal(t, 126, ee.ExitCode(), "%q", args)
		require.Contains(t, string(out), "paddock-launch: bad arguments", "%q", args)
	}
}
