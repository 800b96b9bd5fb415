package jobspec_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
)

func TestScheduleParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src string
		line      int
		key, msg  string
	}{
		{"schedule needs a name", "command = \"true\"\nschedule = \"@daily\"\n", 1, "name", "a schedule needs a name"},
		{"TZ prefix", "name = \"s\"\ncommand = \"true\"\nschedule = \"TZ=UTC 0 3 * * *\"\n", 3, "schedule", "timezone key"},
		{"CRON_TZ prefix", "name = \"s\"\ncommand = \"true\"\nschedule = \"CRON_TZ=Nowhere/City * * * * *\"\n", 3, "schedule", "time zone prefix"},
		{"seven fields", "name = \"s\"\ncommand = \"true\"\nschedule = \"* * * * * * *\"\n", 3, "schedule", "7 fields, expected 5"},
		{"step 0", "name = \"s\"\ncommand = \"true\"\nschedule = \"*/0 * * * *\"\n", 3, "schedule", "invalid schedule"},
		{"minute 60", "name = \"s\"\ncommand = \"true\"\nschedule = \"60 * * * *\"\n", 3, "schedule", "invalid schedule"},
		{"schedule with after", "[[job]]\nname = \"a\"\ncommand = \"true\"\n[[job]]\nname = \"s\"\ncommand = \"true\"\nschedule = \"@daily\"\nafter = [\"a\"]\n", 8, "after", "a schedule cannot wait"},
		{"after names a schedule", "[[job]]\nname = \"s\"\ncommand = \"true\"\nschedule = \"@daily\"\n[[job]]\nname = \"a\"\ncommand = \"true\"\nafter = [\"s\"]\n", 8, "after", "is a schedule in this file"},
		{"overlap typo", "name = \"s\"\ncommand = \"true\"\nschedule = \"@daily\"\noverlap = \"skp\"\n", 4, "overlap", `(did you mean "skip"?)`},
		{"missed unknown", "name = \"s\"\ncommand = \"true\"\nschedule = \"@daily\"\nmissed = \"all\"\n", 4, "missed", "expected one of run_once, skip"},
		{"missed_grace bad", "name = \"s\"\ncommand = \"true\"\nschedule = \"@daily\"\nmissed_grace = \"0s\"\n", 4, "missed_grace", "positive"},
		{"policy without schedule", "name = \"j\"\ncommand = \"true\"\noverlap = \"allow\"\n", 3, "overlap", "apply to schedules only"},
		{"misspelt key", "name = \"s\"\ncommand = \"true\"\nschedule = \"@daily\"\nmised = \"skip\"\n", 4, "mised", `did you mean "missed"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			specs, err := jobspec.Parse("s.toml", []byte(tt.src), "/d")
			require.Nil(t, specs)
			var verr *jobspec.ValidationError
			require.True(t, errors.As(err, &verr), "%v", err)
			fe := verr.Errors[0]
			require.Equal(t, tt.line, fe.Line, "%v", err)
			require.Equal(t, tt.key, fe.Key, "%v", err)
			require.Contains(t, fe.Message, tt.msg)
		})
	}
}

func TestScheduleParseValid(t *testing.T) {
	t.Parallel()
	src := `
[defaults]
missed = "skip"

[[job]]
name = "nightly"
command = "make clean"
schedule = " 0 3 * * * "
timezone = "America/New_York"
overlap = "allow"
missed_grace = "2h"

[[job]]
name = "once"
command = "true"
`
	specs, err := jobspec.Parse("s.toml", []byte(src), "/d")
	require.NoError(t, err)
	require.Len(t, specs, 2)
	require.Equal(t, "0 3 * * *", specs[0].Schedule)
	require.Equal(t, jobspec.OverlapAllow, specs[0].Overlap)
	require.Equal(t, jobspec.MissedSkip, specs[0].Missed)
	require.Equal(t, "2h0m0s", specs[0].MissedGrace.String())
	require.Empty(t, specs[1].Schedule)
	require.Empty(t, specs[1].Missed, "a default policy does not apply to a one-off job (and is no error)")
}
