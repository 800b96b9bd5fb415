package main

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionInfo is what `paddock version` says, read from the build
// information the Go toolchain embeds in the binary (runtime/debug).
type versionInfo struct {
	MessageType string `json:"message_type"` // "version"
	// Version is the main module's version: a tag for `go install
	// paddock@vX`, "(devel)" for a build from a checkout.
	Version string `json:"version"`
	// Revision and Time are the commit the binary was built from (VCS
	// stamping, on by default in a git checkout); "" when unknown.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	// Modified: the checkout had uncommitted changes.
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// readVersion returns the binary's version information.
func readVersion() versionInfo {
	v := versionInfo{MessageType: "version", Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Version = cmp.Or(bi.Main.Version, v.Version)
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the one line of `paddock --version` and `paddock version`:
// "paddock VERSION (REVISION[-dirty], TIME) GOVERSION PLATFORM".
func (v versionInfo) String() string {
	s := "paddock " + v.Version
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if v.Modified {
			rev += "-dirty"
		}
		s += " (" + rev
		if v.Time != "" {
			s += ", " + v.Time
		}
		s += ")"
	}
	return s + " " + v.GoVersion + " " + v.Platform
}

func newVersionCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print paddock's version, the commit it was built from and its Go version",
		Long: `Print paddock's version: the module version, the commit it was built
from (and whether the checkout had changes), the Go version and the
platform. Workers that share a queue should run the same version. With
--json it prints one object with message_type "version".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVersion(cmd.OutOrStdout(), gopts)
		},
	}
}

func runVersion(out io.Writer, gopts *GlobalOptions) error {
	v := readVersion()
	if gopts.JSON {
		return writeJSON(out, v)
	}
	_, err := fmt.Fprintln(out, v)
	return err
}
