package jobspec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
)

// TestSpecLimits: a job over one of the limits of limits.go is refused by
// Parse (so by submit, run and check) with file, line and key, and by
// Validate (so by a store given a spec built in Go).
func TestSpecLimits(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", jobspec.MaxArgBytes+1)
	fits := strings.Repeat("x", jobspec.MaxArgBytes)
	quoted := func(ss []string) string { return `["` + strings.Join(ss, `", "`) + `"]` }
	many := func(n int, s string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	labels := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "l%d = \"v\"\n", i)
		}
		return b.String()
	}
	cases := []struct {
		name string
		toml string // the job, after a first line `name = "j"`
		line int    // in the whole file
		key  string
		msg  string
	}{
		{"argument", "command = [\"echo\", \"" + big + "\"]\n", 2, "command", "argument 2 is 131072 bytes, more than the 131071 a single argument may have (MAX_ARG_STRLEN, execve(2))"},
		{"shell string", "\ncommand = \"" + big + "\"\n", 3, "command", "argument 3 is 131072 bytes"},
		{"argv and env", "command = " + quoted(append([]string{"echo"}, many(8, fits)...)) + "\n", 2, "command", "more than the 1048576 a job may use (half of ARG_MAX, execve(2))"},
		{"count", "command = " + quoted(append([]string{"echo"}, many(jobspec.MaxArgs, "")...)) + "\n", 2, "command", "65537 arguments, more than the 65536 a job may have"},
		{"env entry", "command = \"true\"\n[env]\nBIG = \"" + big + "\"\n", 4, "env.BIG", "BIG=... is 131076 bytes, more than the 131071 a single variable may have"},
		{"labels", "command = \"true\"\n[labels]\n" + labels(jobspec.MaxLabels+1), 3, "labels", "65 labels, more than the 64 a job may have"},
		{"label value", "command = \"true\"\n[labels]\nnote = \"" + strings.Repeat("v", jobspec.MaxLabelValueBytes+1) + "\"\n", 4, "labels.note", "value is 1025 bytes, more than the 1024 a label may have"},
		{"writable", "command = \"true\"\nmode = \"workspace_write\"\nwritable = " + quoted(many(jobspec.MaxWritable+1, "/tmp/w")) + "\n", 4, "writable", "65 paths, more than the 64 a job may name"},
		{"cwd", "command = \"true\"\ncwd = \"/" + strings.Repeat("d", jobspec.MaxPathBytes) + "\"\n", 3, "cwd", "path of 4096 bytes, more than 4095 (PATH_MAX)"},
		{"hooks", "command = \"true\"\nhooks = " + quoted(many(jobspec.MaxJobHooks+1, "h")) + "\n", 3, "hooks", "33 hooks, more than the 32 a job may ask for"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := "name = \"j\"\n" + tc.toml
			_, err := jobspec.Parse("job.toml", []byte(text), "/srv")
			var verr *jobspec.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Len(t, verr.Errors, 1, err.Error())
			fe := verr.Errors[0]
			require.Equal(t, "job.toml", fe.File)
			require.Equal(t, tc.key, fe.Key)
			require.Contains(t, fe.Message, tc.msg)
			require.Equal(t, tc.line, fe.Line, "the key's own line")

			// The same job built in Go is refused by Validate.
			spec := jobspec.Spec{Name: "j", Command: []string{"true"}}
			switch tc.name {
			case "argument":
				spec.Command = []string{"echo", big}
			case "env entry":
				spec.Env = map[string]string{"BIG": big}
			case "labels":
				spec.Labels = map[string]string{}
				for i := range jobspec.MaxLabels + 1 {
					spec.Labels[fmt.Sprint(i)] = "v"
				}
			default:
				return
			}
			err = jobspec.Validate("go", []jobspec.Spec{spec})
			require.ErrorAs(t, err, &verr)
			require.Equal(t, tc.key, verr.Errors[0].Key)
			require.Contains(t, verr.Errors[0].Message, tc.msg)
		})
	}

	// At the limits, a job is fine.
	text := "name = \"j\"\ncommand = [\"echo\", \"" + fits + "\"]\n[labels]\n" + labels(jobspec.MaxLabels)
	_, err := jobspec.Parse("job.toml", []byte(text), "/srv")
	require.NoError(t, err)
}
