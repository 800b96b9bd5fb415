package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"paddock/cmd/internal/compose"
	"paddock/sandbox"
)

// ProbeOptions are the options of paddock probe. It has no flags of its
// own; the global --json selects the output.
type ProbeOptions struct {
	// CachePath, when not "", is the state directory's probe cache, which
	// the fresh probe rewrites (or removes, when bwrap is unusable).
	// Defaults to "" (no cache touched).
	CachePath string
}

func newProbeCommand(gopts *GlobalOptions) *cobra.Command {
	var opts ProbeOptions
	return &cobra.Command{
		Use:   "probe",
		Short: "Check bubblewrap on this host: grade, layers, executable, version, network isolation",
		Long: `probe runs real bubblewrap sandboxes to find what this host supports:
the grade (full, partial or unusable), the layers of the fence that hold
here (bwrap always; seccomp; landlock with its ABI level, checked by a
write it must stop), the absolute bwrap executable, its version, whether
network isolation (--unshare-net) works and whether paddock runs as root.
A missing layer is listed as missing, with the reason in a note. When bwrap
is unusable it prints bwrap's own error line and a hint, and exits 1. With
--json it prints one object with message_type "probe" ("layers",
"seccomp", "landlock_abi" among its fields).

It always runs bwrap, and rewrites the state directory's probe cache
(<state>/cache/probe.json, which worker, run and check read at start-up) or
removes it when bwrap is unusable. It creates no state directory: without
one, nothing is cached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// probe always runs bwrap; it refreshes the cache of a state
			// directory that exists, and creates none.
			// A config given with --config must load; the default one
			// need not.
			_, stateDir, err := loadConfig(cmd, gopts)
			if err != nil && cmd.Flags().Changed("config") {
				return err
			}
			if err == nil {
				if fi, err := os.Stat(stateDir); err == nil && fi.IsDir() {
					opts.CachePath = (&compose.Install{StateDir: stateDir}).ProbeCachePath()
				}
			}
			return runProbe(cmd.Context(), opts, gopts, cmd.OutOrStdout())
		},
	}
}

// probeMessage is the --json output of paddock probe.
type probeMessage struct {
	MessageType string `json:"message_type"`
	sandbox.ProbeReport
}

func runProbe(ctx context.Context, opts ProbeOptions, gopts *GlobalOptions, out io.Writer) error {
	rep, err := sandbox.ProbeCached(ctx, sandbox.ProbeCachedParams{Path: opts.CachePath, Refresh: true})
	if err != nil && !errors.Is(err, sandbox.ErrUnusable) {
		return err
	}
	if gopts.JSON {
		if werr := writeJSON(out, probeMessage{MessageType: "probe", ProbeReport: rep}); werr != nil {
			return werr
		}
	} else {
		printProbe(out, rep)
	}
	if err != nil {
		return &exitCodeError{code: exitFailure}
	}
	return nil
}

func printProbe(w io.Writer, r sandbox.ProbeReport) {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(w, "grade:             %s\n", r.Grade)
	if r.Usable() {
		layers := strings.Join(r.Layers, ", ")
		if missing := r.Discovery().MissingLayers(); len(missing) > 0 {
			layers += " (no " + strings.Join(missing, ", no ") + ": see the notes)"
		}
		fmt.Fprintf(w, "layers:            %s\n", layers)
	}
	fmt.Fprintf(w, "executable:        %s\n", orNone(r.Executable))
	fmt.Fprintf(w, "version:           %s\n", orNone(r.Version))
	fmt.Fprintf(w, "network isolation: %s\n", yes(r.NetworkIsolation))
	fmt.Fprintf(w, "root:              %s\n", yes(r.Root))
	fmt.Fprintf(w, "setuid bwrap:      %s\n", yes(r.Setuid))
	if r.Usable() {
		kp := r.KernelPaths
		fmt.Fprintf(w, "kernel read-only:  %s\n", orNone(strings.Join(kp.ReadOnly, " ")))
		fmt.Fprintf(w, "kernel masked:     %s\n", orNone(strings.Join(append(slices.Clone(kp.MaskedFiles), kp.MaskedDirs...), " ")))
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error:             %s\n", r.Error)
	}
	if r.BwrapLine != "" {
		fmt.Fprintf(w, "bwrap said:        %s\n", r.BwrapLine)
	}
	if r.Hint != "" {
		fmt.Fprintf(w, "hint:              %s\n", r.Hint)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note:              %s\n", strings.TrimSpace(n))
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
