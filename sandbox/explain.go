package sandbox

import (
	"bytes"
	"strings"
)

// Diagnosis explains one error line printed by bwrap.
type Diagnosis struct {
	// Line is the bwrap line as printed, starting with "bwrap: ".
	Line string
	// Explanation says in plain words what went wrong ("" for a line the
	// table does not know).
	Explanation string
	// Hint says what to do about it ("" for a line the table does not know).
	Hint string
}

// known bwrap error lines, matched by substring after the "bwrap: " prefix,
// first match wins.
var diagnoses = []struct{ match, explanation, hint string }{
	{"setting up uid map: Permission denied",
		"the kernel let bwrap create a user namespace but refused its uid map; on Ubuntu 24.04 and later this is AppArmor's restriction of unprivileged user namespaces",
		"allow bwrap an AppArmor profile with 'userns' (Ubuntu ships /etc/apparmor.d/bwrap-userns-restrict as a template), or set sysctl kernel.apparmor_restrict_unprivileged_userns=0"},
	{"setting up uid map",
		"bwrap could not write the uid map of the new user namespace (a setuid bwrap cannot map root for a fresh /dev; or an LSM refused it)",
		"nothing to do when the probe falls back to the partial grade; otherwise install bwrap without the setuid bit where user namespaces are allowed"},
	{"No permissions to create a new namespace",
		"the kernel does not let unprivileged users create user namespaces",
		"set sysctl kernel.unprivileged_userns_clone=1 (older Debian) and user.max_user_namespaces to a positive value; in a container, allow unshare(CLONE_NEWUSER) in its seccomp profile"},
	{"Creating new namespace failed: nesting depth",
		"the user namespace limit is exhausted (nesting depth or user.max_user_namespaces)",
		"raise sysctl user.max_user_namespaces, or run paddock outside a nested sandbox"},
	{"Creating new namespace failed",
		"the kernel refused to create the namespaces (no user namespace support, or a container's seccomp profile forbids it)",
		"enable user namespaces (CONFIG_USER_NS, user.max_user_namespaces > 0); in Docker run with a seccomp profile that allows unshare/clone of namespaces"},
	{"Can't mount proc on",
		"a fresh /proc cannot be mounted here (typical in a container whose /proc has masked paths); the partial grade does without it",
		"nothing to do: paddock uses the partial grade; for the full grade run the container with unmasked proc (docker: --security-opt systempaths=unconfined)"},
	{"Can't mount devpts on",
		"a fresh /dev cannot be built here; the partial grade binds the device nodes instead",
		"nothing to do: paddock uses the partial grade"},
	{"Failed to make / slave",
		"mounts cannot be made in the new mount namespace (a container without mount rights, or an LSM blocks mount)",
		"run paddock where user namespaces may mount (outside the container, or a container that allows unshare and mount)"},
	{"pivot_root",
		"bwrap could not switch to the new root (pivot_root refused; often a container whose root is not a mount point, or an LSM policy)",
		"run paddock outside the container, or in one that allows pivot_root"},
	{"loopback: Failed RTM_NEWADDR",
		"bwrap created a network namespace but could not bring up its loopback interface, so network isolation (network = false) is unavailable",
		"jobs with network = false are refused; allow netlink in the container or run them elsewhere"},
	{"loopback:",
		"bwrap could not set up the loopback interface of a new network namespace",
		"jobs with network = false are refused on this host"},
	{"Unknown option",
		"this bwrap is too old for the options paddock needs",
		"install bubblewrap 0.8.0 or newer"},
	{"--disable-userns",
		"this bwrap rejected --disable-userns",
		"install bubblewrap 0.8.0 or newer"},
	{"Can't chdir to",
		"the working directory does not exist inside the sandbox",
		"use a working directory inside the workspace"},
	{"landlock",
		"the launcher could not enforce the Landlock layer inside the sandbox, so the command was not run (the kernel refused the ruleset the probe found it supports)",
		"run paddock probe: a kernel or security-module change since the probe can cause this"},
	{"execvp",
		"the command could not be started inside the sandbox (not found, or not executable)",
		"check that the command exists on the host and is executable; a name without a slash is looked up in the job's PATH"},
	{"Can't find source path",
		"a directory to bind into the sandbox does not exist",
		"create the workspace and writable roots before running the job"},
	{"Operation not permitted",
		"the kernel refused an operation bwrap needs (often a container's seccomp profile or an LSM)",
		"run paddock outside the container, or allow user namespaces and mounts in it"},
	{"Permission denied",
		"the kernel refused an operation bwrap needs",
		"check LSM (AppArmor, SELinux) policies for bwrap"},
}

// Diagnose finds the first line of stderr that starts with "bwrap: " and
// explains it. ok is false when no line starts with "bwrap: " (a line that
// merely contains it, for example a job's own output, does not count). A
// bwrap line the table does not know is returned with empty Explanation and
// Hint. Diagnose is pure and safe for concurrent use.
func Diagnose(stderr []byte) (d Diagnosis, ok bool) {
	for _, line := range bytes.Split(stderr, []byte("\n")) {
		l := strings.TrimRight(string(line), "\r")
		if !strings.HasPrefix(l, "bwrap: ") {
			continue
		}
		d.Line = l
		d.Explanation, d.Hint = explain(l)
		return d, true
	}
	return Diagnosis{}, false
}

// explain returns the explanation and hint of the first entry of the
// table line matches, or "" and "".
// explainLaunch explains a launcher's report by the step that failed, its
// first word: the rest of the message holds the job's own words (its
// command's name, its workspace's path), which must never choose the
// explanation or its hint.
func explainLaunch(msg string) (explanation, hint string) {
	for _, step := range []string{"execvp", "landlock"} {
		if strings.HasPrefix(msg, step) {
			return explain(step)
		}
	}
	return "", ""
}

func explain(line string) (explanation, hint string) {
	for _, k := range diagnoses {
		if strings.Contains(line, k.match) {
			return k.explanation, k.hint
		}
	}
	return "", ""
}
