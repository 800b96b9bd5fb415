package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"paddock/cmd/internal/compose"
	"paddock/internal/suggest"
)

// GlobalOptions are the flags every command shares. They are filled by cobra
// before any command's run function is called.
type GlobalOptions struct {
	// StateDir holds the queue database, logs, the inbox and the hook
	// compilation cache. Defaults to $PADDOCK_STATE_DIR, else
	// $XDG_STATE_HOME/paddock, else ~/.local/state/paddock.
	StateDir string
	// ConfigPath is the config file. Defaults to
	// $XDG_CONFIG_HOME/paddock/config.toml, else ~/.config/paddock/config.toml.
	// A missing file at the default path is not an error.
	ConfigPath string
	// Store is the queue's database: a PostgreSQL URL shared by workers
	// on several hosts. Defaults to $PADDOCK_STORE, else the config's
	// store, else "" (the state directory's SQLite file).
	Store string
	// JSON makes reporting commands print JSON objects, each with a
	// message_type, instead of text.
	JSON bool
}

// AddFlags registers the global flags on cmd's persistent flag set.
func (o *GlobalOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.StateDir, "state-dir", compose.DefaultStateDir(), "state directory: queue, logs, inbox, hook cache; from $PADDOCK_STATE_DIR, else the config's state_dir, else $XDG_STATE_HOME/paddock")
	f.StringVar(&o.ConfigPath, "config", compose.DefaultConfigPath(), "config file, from $XDG_CONFIG_HOME/paddock/config.toml when not given; a missing file at that default is fine")
	f.StringVar(&o.Store, "store", os.Getenv("PADDOCK_STORE"), "the queue's database: postgres://USER@HOST/DB shared by several hosts; from $PADDOCK_STORE, else the config's store, else the state directory's SQLite file")
	f.BoolVar(&o.JSON, "json", false, "print JSON objects (each with a message_type) instead of text")
}

// writeJSON writes v as one line of JSON to w.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func newRootCommand(gopts *GlobalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:           "paddock",
		Short:         "Run TOML-defined jobs from a durable queue, vetted by WebAssembly hooks, inside a bubblewrap write fence",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       readVersion().String(), // --version
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// What every command prints may quote hostile text (termsafe.go).
	root.SetOut(termSafeWriter{os.Stdout})
	root.SetErr(termSafeWriter{os.Stderr})
	gopts.AddFlags(root)
	root.AddCommand(
		// Each command lives in cmd_<name>.go as new<Name>Command(gopts).
		newSubmitCommand(gopts),
		newRunCommand(gopts),
		newWorkerCommand(gopts),
		newLsCommand(gopts),
		newShowCommand(gopts),
		newLogsCommand(gopts),
		newWaitCommand(gopts),
		newCancelCommand(gopts),
		newRetryCommand(gopts),
		newCheckCommand(gopts),
		newProbeCommand(gopts),
		newConfineCommand(gopts),
		newHookCommand(gopts),
		newSchedulesCommand(gopts),
		newGroupsCommand(gopts),
		newPauseCommand(gopts),
		newResumeCommand(gopts),
		newPolicyCommand(gopts),
		newStoreCommand(gopts),
		newVersionCommand(gopts),
	)
	markUsageErrors(root)
	return root
}

// argsError is the usage error for a command given the wrong number of
// arguments, in the words of its usage line: "paddock cancel takes
// ID|NAME..., got none" rather than cobra's "requires at least 1 arg(s),
// only received 0".
func argsError(cmd *cobra.Command, a []string) error {
	want := strings.TrimSpace(strings.TrimPrefix(cmd.Use, cmd.Name()))
	if want == "" {
		want = "no arguments"
	}
	got := "none"
	if len(a) > 0 {
		got = fmt.Sprintf("%d: %s", len(a), shellJoin(a))
	}
	return usagef("%s takes %s, got %s (see %s --help)", cmd.CommandPath(), want, got, cmd.CommandPath())
}

// markUsageErrors makes cobra's own errors (an unknown flag or a flag that
// does not parse, the wrong number of arguments, an unknown command)
// usage errors, exit 2, like paddock's: `paddock run` must not exit 1,
// which is also "the job exited 1", for a typo.
func markUsageErrors(c *cobra.Command) {
	c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// A negative number among the arguments reads as flags
		// ("unknown shorthand flag: '1' in -1"): say so, since no
		// paddock argument takes one.
		msg := err.Error()
		if i := strings.LastIndex(msg, " in -"); strings.HasPrefix(msg, "unknown shorthand flag: ") && i > 0 {
			if neg := msg[i+len(" in "):]; isNumber(neg) {
				return usagef("%s: %s is not a flag, and no argument of it may be negative (see %s --help)", cmd.CommandPath(), neg, cmd.CommandPath())
			}
		}
		return &usageError{err}
	})
	if c.Args != nil {
		args := c.Args
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return argsError(cmd, a)
			}
			return nil
		}
	} else if c.HasSubCommands() {
		// Any argument left over is an unknown subcommand; none shows the
		// help, as cobra does.
		c.Args = cobra.ArbitraryArgs
		if !c.Runnable() {
			c.RunE = func(cmd *cobra.Command, a []string) error {
				if len(a) > 0 {
					return usagef("unknown command %q for %q%s", a[0], cmd.CommandPath(), suggestCommand(cmd, a[0]))
				}
				return cmd.Help()
			}
		} else {
			run := c.RunE
			c.RunE = func(cmd *cobra.Command, a []string) error {
				if len(a) > 0 {
					return usagef("unknown command %q for %q%s", a[0], cmd.CommandPath(), suggestCommand(cmd, a[0]))
				}
				return run(cmd, a)
			}
		}
	}
	for _, sub := range c.Commands() {
		markUsageErrors(sub)
	}
}

// suggestCommand is a did-you-mean among cmd's subcommands.
func suggestCommand(cmd *cobra.Command, name string) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return suggest.DidYouMean(name, names)
}

// isNumber reports whether s is a decimal number, sign included.
func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
