package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"paddock/cmd/internal/compose"
	"paddock/internal/suggest"
	"paddock/jobspec"
	"paddock/runner"
	"paddock/sandbox"
)

// ConfineOptions are the flags of paddock confine.
type ConfineOptions struct {
	// Mode is the sandbox mode. Defaults to workspace_write.
	Mode string
	// Workspace is the job's directory. Defaults to "." (canonicalised).
	Workspace string
	// Network shares the host network. Defaults to true; --network=false
	// adds --unshare-net.
	Network bool
	// Writable are extra writable roots (workspace_write only).
	Writable []string
	// UnixSockets lets the command create Unix sockets (the job file's
	// unix_sockets). Defaults to false.
	UnixSockets bool
	// SeccompFile, when not "", is where the seccomp program of this
	// policy is written (for running the argv by hand). Defaults to "".
	SeccompFile string
}

func newConfineCommand(gopts *GlobalOptions) *cobra.Command {
	opts := ConfineOptions{}
	cmd := &cobra.Command{
		Use:   "confine [flags] -- ARGV...",
		Short: "Print the bwrap argv that would run ARGV under a sandbox policy, without running it",
		Long: `confine builds the sandbox policy from the flags, probes bwrap (for the
confined modes) and prints the exact argv paddock would run, shell-quoted on
one line. Nothing is run. With --json it prints the argv as a JSON array
of strings (a bare array, not an object, so that it can be handed to a
program as is).

The argv names the fence's layers this host has (paddock probe lists
them): --unshare-ipc always, --seccomp 4 (the seccomp program on
descriptor 4), and, with Landlock, the launcher on descriptor 6 as the
sandbox's first program (/proc/self/fd/6 at the full grade; bound at
the partial grade), with the writable set it enforces: a worker hands it
a small launcher image, and paddock's own binary (its hidden
__sandbox-launch command) reads the same arguments. When the host lacks a layer, confine
says so on stderr ("paddock: warning: ..."; with --json a
"confine_warning" object). The argv expects descriptors as paddock
passes them: 3, bwrap's status (--json-status-fd 3); 4, the seccomp
program, which --seccomp-file FILE writes out; 5, the launcher's failure
report; 6, the launcher (the paddock binary will do). To run it by hand:
  paddock confine --seccomp-file /tmp/prog -- CMD   # prints ARGV
  ARGV 3>/dev/null 4</tmp/prog 5>/dev/null 6<"$(command -v paddock)"

Without --workspace the workspace is the current directory, made absolute
with symlinks resolved: bound writable (workspace_write) or read-only
(read_only), and the command's working directory (--chdir);
danger_full_access binds nothing. From / or a system directory such as
/usr, confine refuses, whatever the mode.

The argv has the queue's policy in it as a worker builds it (the state
directory's queue: its hidden and protected paths, the defaults when no
policy is set). A protected path that does not exist is watched by a
worker while its job runs and moved aside if the job makes it; run by
hand, the argv lets the command make it. When a paddock worker (with the same --config and
--state-dir) would refuse to run a job with this policy, because the
workspace or a --writable path contains or lies in what paddock protects
(its state directory, config, hooks, its own binary, bwrap), or the
queue's policy would (workspace_roots, a system tree, the network, Unix
sockets), confine still prints the argv and exits 0, and writes the
reason on stderr as
"paddock: warning: a paddock worker would not run a job with this
workspace: REASON" (with --json, a "confine_warning" object).`,
		Example: `  paddock confine -- make test
  paddock confine --mode read_only --workspace ./src --network=false -- sh -c 'ls'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("confine: no command given (usage: paddock confine [flags] -- ARGV...)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// The fence a worker would build; without a usable default
			// config, the one of the defaults (binary, bwrap, default
			// state). A config given with --config must load.
			cfg, stateDir, err := loadConfig(cmd, gopts)
			if err != nil && cmd.Flags().Changed("config") {
				return err
			}
			if err != nil {
				cfg, stateDir = runner.Config{}, ""
			}
			// The queue's policy, when the state directory's queue can be
			// read: its hidden and protected paths are in the argv as a
			// worker builds it, and its ceilings are warned of.
			in := &compose.Install{Config: cfg, StateDir: stateDir, Policy: runner.DefaultPolicy()}
			if stateDir != "" {
				if pol, err := queuePolicy(cmd.Context(), cmd, gopts); err == nil {
					in.Policy = pol
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "paddock: warning: the queue's policy could not be read (%v): the argv shows its defaults\n", err)
				}
			}
			if opts.Mode == string(sandbox.ModeDangerFullAccess) && !cmd.Flags().Changed("network") {
				// As a job file's network defaults for this mode: it
				// cannot isolate the network.
				opts.Network = true
			}
			return runConfine(cmd.Context(), opts, gopts, in, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Mode, "mode", string(sandbox.ModeWorkspaceWrite), "sandbox mode: read_only, workspace_write or danger_full_access")
	f.StringVar(&opts.Workspace, "workspace", ".", "the job's workspace directory, bound and made the working directory (symlinks resolved)")
	f.BoolVar(&opts.Network, "network", false, "share the host network, as a job with network = true under a policy that allows it (default: isolated, as jobs are; shared for danger_full_access, which cannot isolate it)")
	f.StringArrayVar(&opts.Writable, "writable", nil, "an extra writable root (repeatable; workspace_write only)")
	f.BoolVar(&opts.UnixSockets, "unix-sockets", false, "let the command create Unix sockets (a job's unix_sockets = true)")
	f.StringVar(&opts.SeccompFile, "seccomp-file", "", "write the seccomp program (descriptor 4 of the argv) to this file")
	return cmd
}

// queuePolicy reads the queue's policy (the defaults when none is set,
// or where there is no queue: it makes none), without binding a hook
// chain to it.
func queuePolicy(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions) (runner.Policy, error) {
	a, err := newApp(cmd, gopts)
	if err != nil {
		return runner.Policy{}, err
	}
	if !a.HasStore() {
		// Nothing to read, and nothing to make: confine changes nothing.
		return runner.DefaultPolicy(), nil
	}
	if err := a.openStore(ctx); err != nil {
		return runner.Policy{}, err
	}
	defer a.Close()
	return compose.StoredPolicy(ctx, a.store)
}

// runConfine writes the confined argv to out. With in (an install and
// the queue's policy), the argv is built as its worker would (its fence:
// hidden and protected paths), and what the worker or the policy would
// refuse is written as a warning to errOut; confine still succeeds.
func runConfine(ctx context.Context, opts ConfineOptions, gopts *GlobalOptions, in *compose.Install, args []string, out, errOut io.Writer) error {
	var fence *runner.Fence
	if in != nil {
		fence = in.Fence()
	}
	if len(args) == 0 {
		return usagef("confine: no command given (usage: paddock confine [flags] -- ARGV...)")
	}
	mode, err := sandbox.ParseMode(opts.Mode)
	if err != nil {
		return usagef("--mode: %w%s", err, suggest.DidYouMean(opts.Mode, jobspec.Modes()))
	}
	params := sandbox.PolicyParams{
		Mode:        mode,
		Workspace:   opts.Workspace,
		Network:     opts.Network,
		Writable:    opts.Writable,
		UnixSockets: opts.UnixSockets,
	}
	newPolicy := sandbox.NewPolicy
	if fence != nil {
		newPolicy = fence.Policy // the state directory hidden, as a worker runs it
	}
	policy, err := newPolicy(params)
	if err != nil {
		return usagef("%w", err)
	}
	if mode.Confined() {
		rep, err := sandbox.Probe(ctx)
		if err != nil {
			msg := err.Error()
			if rep.Hint != "" {
				msg += " (hint: " + rep.Hint + ")"
			}
			return errors.New(msg + "; see paddock probe")
		}
	}
	cp := sandbox.ConfineParams{Argv: args, Policy: policy, Discovery: sandbox.Discovered()}
	if fence != nil {
		// A root worker starts bwrap where the substitutes are bound
		// already (sandbox.StartWithDeviceNodes); a command run by hand is
		// not, so its argv binds them itself.
		cp.DeviceNodes = fence.DeviceNodes()
	}
	argv, err := sandbox.Build(cp)
	if err != nil {
		return err
	}
	warn := func(msg string) {
		if gopts.JSON {
			writeJSON(errOut, map[string]any{"message_type": "confine_warning", "message": msg})
		} else {
			fmt.Fprintf(errOut, "paddock: warning: %s\n", msg)
		}
	}
	if fence != nil {
		if ferr := fence.Check(policy, ""); ferr != nil {
			warn("a paddock worker would not run a job with this workspace: " + ferr.Error())
		}
		ask := runner.Ask{Mode: mode, Network: opts.Network, UnixSockets: opts.UnixSockets, Workspace: policy.Workspace(), Writable: policy.Writable()}
		if refused := in.Policy.Judge(ask); refused != nil {
			warn("the queue's policy would refuse a job asking this: " + refused.Error())
		}
	}
	if mode.Confined() {
		if missing := sandbox.Discovered().MissingLayers(); len(missing) > 0 {
			warn(fmt.Sprintf("this host's fence lacks the %s layer: jobs run under %s only (see paddock probe)",
				strings.Join(missing, " and "), strings.Join(sandbox.Discovered().Layers(), ", ")))
		}
	}
	if opts.SeccompFile != "" {
		prog, err := sandbox.SeccompBytes(sandbox.SeccompParams{UnixSockets: policy.UnixSockets()})
		if err != nil {
			return err
		}
		if err := os.WriteFile(opts.SeccompFile, prog, 0o644); err != nil {
			return fmt.Errorf("--seccomp-file: %w", err)
		}
	}
	if gopts.JSON {
		return writeJSON(out, argv)
	}
	_, err = fmt.Fprintln(out, shellJoin(argv))
	return err
}

// shellJoin quotes argv for a POSIX shell: words made only of safe
// characters stay bare, the rest are single-quoted, and a word holding a
// character a terminal would act on ([termUnsafe], or a byte that is not
// UTF-8) is written in ANSI-C quoting, $'...' with escapes (bash, zsh,
// ksh, and POSIX sh since its 2024 edition), so that what is printed is
// both inert on a terminal and the same word when pasted.
func shellJoin(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shellQuote(a))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	if termSafe(s) != s {
		return ansiCQuote(s)
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ansiCQuote writes s as $'...': backslash and quote escaped, the
// characters [termUnsafe] names, and each byte that is not UTF-8, as
// \xHH of their bytes (read back the same in any locale); the rest as it
// is.
func ansiCQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for s != "" {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case termUnsafe(r):
			// Its UTF-8 bytes: \u is read by the shell in its locale's
			// encoding, which need not be UTF-8.
			for _, c := range []byte(s[:n]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	b.WriteByte('\'')
	return b.String()
}
