package sandbox

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadStatus(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		want    Status
		wantErr bool
	}{
		{"", Status{}, false},
		{`{ "child-pid": 12, "mnt-namespace": 4026532177, "pid-namespace": 4026532178 }` + "\n", Status{ChildPID: 12, PidNamespace: 4026532178}, false},
		{`{ "child-pid": 12 }` + "\n" + `{ "exit-code": 0 }` + "\n", Status{ChildPID: 12, Ran: true}, false},
		{`{ "child-pid": 12 }` + "\n" + `{ "exit-code": 137 }` + "\n", Status{ChildPID: 12, Ran: true, ExitCode: 137}, false},
		{`{ "child-pid": 12 }` + "\n" + `{ "exit-co`, Status{ChildPID: 12}, true},
	}
	for _, tc := range cases {
		got, err := ReadStatus(strings.NewReader(tc.in))
		require.Equal(t, tc.wantErr, err != nil, "%q: %v", tc.in, err)
		require.Equal(t, tc.want, got, tc.in)
	}
}

// TestWatchStatusEarly: each record reaches the callback as it arrives,
// before the stream ends.
func TestWatchStatusEarly(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	seen := make(chan Status, 3)
	done := make(chan Status, 1)
	go func() {
		st, err := WatchStatus(pr, func(s Status) { seen <- s })
		assert.NoError(t, err)
		done <- st
	}()
	next := func() Status {
		select {
		case s := <-seen:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no callback while the stream was still open")
			return Status{}
		}
	}
	_, err := io.WriteString(pw, `{ "child-pid": 12, "mnt-namespace": 4026532177, "pid-namespace": 4026532178 }`+"\n")
	require.NoError(t, err)
	require.Equal(t, Status{ChildPID: 12, PidNamespace: 4026532178}, next())
	_, err = io.WriteString(pw, `{ "exit-code": 3 }`+"\n")
	require.NoError(t, err)
	require.Equal(t, Status{ChildPID: 12, PidNamespace: 4026532178, Ran: true, ExitCode: 3}, next())
	require.NoError(t, pw.Close())
	require.Equal(t, Status{ChildPID: 12, PidNamespace: 4026532178, Ran: true, ExitCode: 3}, <-done)
	require.Empty(t, seen)
}

// states returns real process states: exit 0, exit 1, killed by SIGKILL.
func states(t *testing.T) (ok, one, killed *os.ProcessState) {
	t.Helper()
	run := func(script string) *os.ProcessState {
		cmd := exec.Command("/bin/sh", "-c", script)
		_ = cmd.Run()
		return cmd.ProcessState
	}
	return run("exit 0"), run("exit 1"), run("kill -9 $$")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	ok, one, killed := states(t)
	ran0 := Status{ChildPID: 5, Ran: true}
	ran1 := Status{ChildPID: 5, Ran: true, ExitCode: 1}
	cases := []struct {
		name string
		p    ClassifyParams
		want Classification
	}{
		{"ran ok", ClassifyParams{Mode: ModeWorkspaceWrite, State: ok, Status: ran0},
			Classification{Outcome: OutcomeSucceeded, Reason: "exit status 0"}},
		{"exit 0 is never a denial", ClassifyParams{Mode: ModeWorkspaceWrite, State: ok, Status: ran0, Stderr: []byte("touch: /usr/x: Read-only file system\n")},
			Classification{Outcome: OutcomeSucceeded, Reason: "exit status 0"}},
		{"ran exit 1", ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte("boom\n")},
			Classification{Outcome: OutcomeFailed, ExitCode: 1, Reason: "exit status 1"}},
		{"ran exit 1 with a bwrap-looking line mid-line", ClassifyParams{Mode: ModeReadOnly, State: one, Status: ran1, Stderr: []byte("job says bwrap: Can't mount proc on /newroot/proc\n")},
			Classification{Outcome: OutcomeFailed, ExitCode: 1, Reason: "exit status 1"}},
		{"ran exit 1 denied", ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte("x\nsh: 1: cannot create /etc/x: Read-only file system\n")},
			Classification{Outcome: OutcomeFailed, ExitCode: 1, Denied: true, Reason: "write refused by the fence: sh: 1: cannot create /etc/x: Read-only file system"}},
		{"bwrap failed, exit 1, never ran", ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: Status{ChildPID: 5}, Stderr: []byte("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")},
			Classification{Outcome: OutcomeRunnerFailed, ExitCode: 1, Denied: true,
				Reason: "bwrap: Can't mount proc on /newroot/proc: Operation not permitted (a fresh /proc cannot be mounted here (typical in a container whose /proc has masked paths); the partial grade does without it; hint: nothing to do: paddock uses the partial grade; for the full grade run the container with unmasked proc (docker: --security-opt systempaths=unconfined)); write refused by the fence: bwrap: Can't mount proc on /newroot/proc: Operation not permitted"}},
		{"bwrap failed without a line", ClassifyParams{Mode: ModeReadOnly, State: one},
			Classification{Outcome: OutcomeRunnerFailed, ExitCode: 1, Reason: "bwrap exited with status 1 before the command ran"}},
		{"bwrap killed after start", ClassifyParams{Mode: ModeReadOnly, State: killed, Status: Status{ChildPID: 9}},
			Classification{Outcome: OutcomeFailed, ExitCode: -1, Signal: "SIGKILL", Reason: "killed by SIGKILL"}},
		{"bwrap killed before start", ClassifyParams{Mode: ModeReadOnly, State: killed},
			Classification{Outcome: OutcomeRunnerFailed, ExitCode: -1, Signal: "SIGKILL", Reason: "bwrap killed by SIGKILL before the command started"}},
		{"never started", ClassifyParams{Mode: ModeReadOnly},
			Classification{Outcome: OutcomeRunnerFailed, ExitCode: -1, Reason: "the process never started"}},
		{"denied after binary output: the reason is text", ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: append(bytes.Repeat([]byte{0}, 8000), "\x1b[31mtail:\t/etc/x: \u202ePermission denied\u200b\x1b[0m\n"...)},
			Classification{Outcome: OutcomeFailed, ExitCode: 1, Denied: true, Reason: "write refused by the fence: tail: /etc/x: Permission denied"}},
		{"denied mid-line: the quote keeps the message", ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte(`{"msg":"[Errno 30] Read-only file system: '/etc/x'","trace":"` + strings.Repeat("frame;", 100) + `"}` + "\n")},
			Classification{Outcome: OutcomeFailed, ExitCode: 1, Denied: true, Reason: `write refused by the fence: {"msg":"[Errno 30] Read-only file system: '/etc/x'","trace":"` + strings.Repeat("frame;", 39) + "frame…"}},
		{"denied on a long line: its end", ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte(strings.Repeat("é", 400) + " cp: /usr/y: Read-only file system\n")},
			Classification{Outcome: OutcomeFailed, ExitCode: 1, Denied: true, Reason: "write refused by the fence: …" + strings.Repeat("é", 133) + " cp: /usr/y: Read-only file system"}},
		{"danger exit 1", ClassifyParams{Mode: ModeDangerFullAccess, State: one, Stderr: []byte("Read-only file system\n")},
			Classification{Outcome: OutcomeFailed, ExitCode: 1, Reason: "exit status 1"}},
		{"danger ok", ClassifyParams{Mode: ModeDangerFullAccess, State: ok},
			Classification{Outcome: OutcomeSucceeded, Reason: "exit status 0"}},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, Classify(tc.p), tc.name)
	}
}

// TestClassifyDenialEscapes: a denial's reason quotes the text a terminal
// shows, without the escape sequences (colours, hyperlinks) around it.
func TestClassifyDenialEscapes(t *testing.T) {
	t.Parallel()
	_, one, _ := states(t)
	ran1 := Status{ChildPID: 5, Ran: true, ExitCode: 1}
	const msg = "touch: cannot touch '/etc/x': Read-only file system"
	cases := []struct{ name, stderr, want string }{
		{"coloured error", "\x1b[1;31merror:\x1b[0m cannot create /etc/x: Read-only file system",
			"error: cannot create /etc/x: Read-only file system"},
		{"colour around the path", "touch: cannot touch '\x1b[01;34m/etc/x\x1b[0m': Read-only file system", msg},
		{"intermediate byte", "\x1b[1 qtouch: cannot touch '/etc/x': Read-only file system", msg},
		{"8-bit CSI", "\u009b1mtouch:\u009b0m cannot touch '/etc/x': Read-only file system", msg},
		{"OSC 8 hyperlink around the path, ST", "touch: cannot touch '\x1b]8;;file:///etc/x\x1b\\/etc/x\x1b]8;;\x1b\\': Read-only file system", msg},
		{"OSC 8 hyperlink around the path, BEL", "touch: cannot touch '\x1b]8;id=1;file://h%C3%B4te/etc/x\a/etc/x\x1b]8;;\a': Read-only file system", msg},
		{"window title before the message", "\x1b]0;make: étape 2\atouch: cannot touch '/etc/x': Read-only file system", msg},
		{"tput sgr0 (ESC ( B, ECMA-35 nF)", "\x1b[1m\x1b(Btouch: cannot touch '/etc/x': Read-only file system\x1b(B\x1b[m", msg},
		{"cursor save and restore (ESC 7, ESC 8: Fp), reset (ESC c: Fs)", "\x1b7\x1bctouch: cannot touch '/etc/x': Read-only file system\x1b8", msg},
		{"two-byte sequences", "\x1bEtouch: cannot touch '/etc/x': Read-only file system\x1bM", msg},
		{"signature split by colours", "touch: cannot touch '/etc/x': Read-only \x1b[1mfile\x1b[22m system", msg},
		{"DCS (sixel) before the message, ST", "\x1bPq#0;2;0;0;0#1!7~\x1b\\" + msg, msg},
		{"SOS, PM, APC around the message", "\x1bXsos\x1b\\touch: cannot touch '\x1b^pm\x1b\\/etc/x': \x1b_Gf=100;AAAA\x1b\\Read-only file system", msg},
		{"8-bit DCS, SOS, PM, APC, 8-bit ST", "\u0090dcs\u009ctouch: \u0098sos\u009ccannot touch \u009epm\u009c'/etc/x': \u009fapc\u009cRead-only file system", msg},
		{"8-bit opener, 7-bit ST", "\u0090dcs\x1b\\" + msg, msg},
		{"7-bit opener, 8-bit ST", "\x1b_apc\u009c" + msg, msg},
		{"ESC in the payload that is not ST", "\x1bPa\x1bb\x1b[31mc\x1b]0;t\ad\x1b\\" + msg, msg},
		{"unterminated: to the line's end", msg + "\x1b_hidden payload", msg},
		{"unterminated 8-bit: to the line's end", msg + "\u009fhidden \x1b payload", msg},
		{"unterminated in binary: only the opener goes", "\x1b_\x00\x01\x02\x03\x04\x05" + msg, msg},
		{"8-bit OSC, 8-bit ST", "\u009d0;title\u009c" + msg, msg},
		{"sequences cut short stay but for ESC", "\x1b[1;31\x01m " + msg + "\x1b[0m \x1b]0;title", "[1;31m " + msg + " ]0;title"},
		{"the cap counts text, not sequences", strings.Repeat("\x1b[1mé\x1b[0m", 400) + " cp: /usr/y: Read-only file system",
			"…" + strings.Repeat("é", 133) + " cp: /usr/y: Read-only file system"},
	}
	for _, tc := range cases {
		c := Classify(ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte("x\n" + tc.stderr + "\n")})
		require.Equal(t, Classification{Outcome: OutcomeFailed, ExitCode: 1, Denied: true, Reason: "write refused by the fence: " + tc.want}, c, tc.name)
	}

	c := Classify(ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte("\x1b]0;Permission denied\x1b\\make: *** [all] Error 1\n")})
	require.Equal(t, Classification{Outcome: OutcomeFailed, ExitCode: 1, Reason: "exit status 1"}, c, "a signature only in a window title is no denial")
	for _, hidden := range []string{
		"\x1bPPermission denied\x1b\\make: *** [all] Error 1",
		"\u0098Permission denied\u009cmake: *** [all] Error 1",
		"make: *** [all] Error 1 \x1b_Permission denied",
		"make: *** [all] Error 1 \u009ePermission \x1b denied",
	} {
		c := Classify(ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte(hidden + "\n")})
		require.Equal(t, Classification{Outcome: OutcomeFailed, ExitCode: 1, Reason: "exit status 1"}, c, "a signature only in a control string is no denial: %q", hidden)
	}
}

// TestDiagnose: every bwrap error line DESIGN.md lists gets an explanation
// and a hint; only lines starting with "bwrap: " count.
func TestDiagnose(t *testing.T) {
	t.Parallel()
	cases := []struct{ line, explains, hints string }{
		{"bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl kernel.unprivileged_userns_clone=1'.", "unprivileged users", "unprivileged_userns_clone"},
		{"bwrap: Creating new namespace failed, likely because the kernel does not support user namespaces.  bwrap must be installed setuid on such systems.", "refused to create the namespaces", "user.max_user_namespaces"},
		{"bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)", "limit is exhausted", "max_user_namespaces"},
		{"bwrap: setting up uid map: Permission denied", "AppArmor", "apparmor_restrict_unprivileged_userns"},
		{"bwrap: Can't mount proc on /newroot/proc: Operation not permitted", "fresh /proc", "partial grade"},
		{"bwrap: Failed to make / slave: Permission denied", "mounts cannot be made", "allows unshare and mount"},
		{"bwrap: pivot_root: Operation not permitted", "pivot_root", "pivot_root"},
		{"bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted", "loopback", "network = false"},
		{"bwrap: Unknown option --disable-userns", "too old", "0.8.0"},
		{"bwrap: Can't chdir to /x: No such file or directory", "working directory", "workspace"},
		{"bwrap: execvp nope: No such file or directory", "could not be started", "looked up in the job's PATH"},
		{"bwrap: setting up uid map: Invalid argument", "uid map", "setuid"},
	}
	for _, tc := range cases {
		d, ok := Diagnose([]byte("some job output\n" + tc.line + "\nmore\n"))
		require.True(t, ok, tc.line)
		require.Equal(t, tc.line, d.Line)
		require.Contains(t, d.Explanation, tc.explains, tc.line)
		require.Contains(t, d.Hint, tc.hints, tc.line)
	}
	_, ok := Diagnose([]byte("error: bwrap: Can't mount proc on /newroot/proc\n"))
	require.False(t, ok, "a runner signature counts only at the start of a line")
	d, ok := Diagnose([]byte("bwrap: something new\n"))
	require.True(t, ok)
	require.Equal(t, Diagnosis{Line: "bwrap: something new"}, d)
}

// randomLine returns n random bytes with no newline: binary output on one
// line of stderr.
func randomLine(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		if b[i] = byte(rng.UintN(256)); b[i] == '\n' {
			b[i] = 0
		}
	}
	return b
}

// TestClassifyDenialAfterBinary: a program that wrote binary to stderr and
// then failed a write leaves its message on the binary's line; the reason
// quotes the message, with at most a few stray characters of the binary
// before it (the clean run that ended the binary: ~0.6 on average for
// random bytes), never hundreds of U+FFFD. A file name
// in a legacy encoding is not binary: its message is quoted whole.
func TestClassifyDenialAfterBinary(t *testing.T) {
	t.Parallel()
	_, one, _ := states(t)
	ran1 := Status{ChildPID: 5, Ran: true, ExitCode: 1}
	const msg = "touch: cannot touch '/etc/x': Read-only file system"
	rng := rand.New(rand.NewPCG(1, 2))
	strays := 0
	for seed := range 200 {
		junk := randomLine(rng, 2000)
		c := Classify(ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: append(junk, msg+"\n"...)})
		require.True(t, c.Denied, "seed %d", seed)
		q, ok := strings.CutPrefix(c.Reason, "write refused by the fence: ")
		require.True(t, ok, "seed %d: %q", seed, c.Reason)
		stray, ok := strings.CutSuffix(q, msg)
		require.True(t, ok, "seed %d: %q", seed, q)
		require.Less(t, utf8.RuneCountInString(stray), binaryGap, "seed %d: %q", seed, q)
		strays += utf8.RuneCountInString(stray)
	}
	require.Less(t, strays, 2*200, "stray characters before the message, in all")

	for _, legacy := range []string{
		"cp: cannot create regular file '/usr/caf\xe9 cr\xe8me/\xe0 la carte': Read-only file system",                      // Latin-1
		"/bin/sh: 1: cannot create /etc/\xee\xf2\xf7\xb8\xf2 \xe7\xe0 \xed\xee\xff\xe1\xf0\xfc.txt: Read-only file system", // CP1251: every letter
		"touch: cannot touch '/etc/gr\xfc\xdf\xe4\xf6\xfc\xc4\xd6': Read-only file system",                                 // six umlauts in a row
	} {
		c := Classify(ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte(legacy + "\n")})
		require.Equal(t, "write refused by the fence: "+strings.ToValidUTF8(legacy, "\uFFFD"), c.Reason)
	}
}

// TestClassifyDenialBeforeBinary: a program that failed a write and then
// wrote binary to stderr leaves the binary on its message's line; the
// reason quotes the message, with at most a few stray characters of the
// binary after it (the clean run that starts the binary), by the junk rule
// of binary before a message. Text in a legacy encoding after the message
// is not binary: it stays.
func TestClassifyDenialBeforeBinary(t *testing.T) {
	t.Parallel()
	_, one, _ := states(t)
	ran1 := Status{ChildPID: 5, Ran: true, ExitCode: 1}
	const msg = "touch: cannot touch '/etc/x': Read-only file system"
	const elf = "\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00>\x00\x01\x00\x00\x00\x10\x10\x00\x00"
	cptext := "/etc/\xee\xf2\xf7\xb8\xf2 \xe7\xe0 \xed\xee\xff\xe1\xf0\xfc.txt" // CP1251: every letter
	cases := []struct{ name, stderr, want string }{
		{"binary right after", msg + elf, msg},
		{"binary after a space", msg + " " + elf + "more text", msg},
		{"binary on both sides", elf + msg + elf, msg},
		{"a legacy encoding after the message, then binary", msg + ": '" + cptext + "' (errno 30), dumping the state" + elf,
			msg + ": '" + strings.ToValidUTF8(cptext, "\uFFFD") + "' (errno 30), dumping the state"},
		{"a colour after the message, then binary", msg + "\x1b[0m" + elf, msg},
	}
	for _, tc := range cases {
		c := Classify(ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: []byte(tc.stderr + "\n")})
		require.Equal(t, Classification{Outcome: OutcomeFailed, ExitCode: 1, Denied: true, Reason: "write refused by the fence: " + tc.want}, c, tc.name)
	}

	rng := rand.New(rand.NewPCG(3, 4))
	strays := 0
	for seed := range 200 {
		junk := randomLine(rng, 2000)
		c := Classify(ClassifyParams{Mode: ModeWorkspaceWrite, State: one, Status: ran1, Stderr: append([]byte(msg), append(junk, '\n')...)})
		require.True(t, c.Denied, "seed %d", seed)
		q, ok := strings.CutPrefix(c.Reason, "write refused by the fence: ")
		require.True(t, ok, "seed %d: %q", seed, c.Reason)
		stray, ok := strings.CutPrefix(q, msg)
		require.True(t, ok, "seed %d: %q", seed, q)
		require.Less(t, utf8.RuneCountInString(stray), binaryGap, "seed %d: %q", seed, q)
		require.NotContains(t, stray, "\uFFFD", "seed %d: %q", seed, q)
		strays += utf8.RuneCountInString(stray)
	}
	require.Less(t, strays, 2*200, "stray characters after the message, in all")
}
