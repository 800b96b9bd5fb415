package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func newStoreCommand(gopts *GlobalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "store",
		Short: "Manage the queue's database (the state directory's SQLite file, or --store postgres://...)",
		Long: `The queue lives in the state directory's SQLite file unless --store,
$PADDOCK_STORE or the config's store names a PostgreSQL database, which
workers on several hosts share (see docs/several-hosts.md).`,
	}
	c.AddCommand(&cobra.Command{
		Use:   "migrate",
		Short: "Bring the queue's schema to this paddock's version",
		Long: `Create the queue's schema, or bring an older one to this paddock's
version, and say which version it is. Any command that opens the queue
does this too; run it before starting upgraded workers so that they do
not race to. A paddock older than the schema refuses to open it (exit 1):
upgrade it rather than downgrading the schema.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStoreMigrate(cmd.Context(), cmd, gopts)
		},
	})
	return c
}

func runStoreMigrate(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions) error {
	a, err := newApp(cmd, gopts)
	if err != nil {
		return err
	}
	line, err := a.MigrateStore(ctx)
	if err != nil {
		return err
	}
	if gopts.JSON {
		return writeJSON(cmd.OutOrStdout(), map[string]string{"message_type": "store_migrated", "detail": line})
	}
	fmt.Fprintln(cmd.OutOrStdout(), line)
	return nil
}
