//go:build tools

// Package paddock pins the module's third-party dependencies while the
// packages that use them are being written; see README.md ("Dependencies")
// for why each one is here. The build tag keeps it out of every build.
package paddock

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "github.com/stretchr/testify/require"
	_ "github.com/tetratelabs/wazero"
	_ "golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)
