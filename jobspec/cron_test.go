package jobspec_test

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, even on hosts without /usr/share/zoneinfo

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// nextN returns the n ticks after from, formatted RFC 3339 in loc.
func nextN(t *testing.T, expr, zone, from string, n int) []string {
	t.Helper()
	c, err := jobspec.ParseCron(expr)
	require.NoError(t, err)
	loc := mustLoc(t, zone)
	at, err := time.Parse(time.RFC3339, from)
	require.NoError(t, err)
	var out []string
	for range n {
		at = c.Next(at, loc)
		require.False(t, at.IsZero(), "no next time after %s", out)
		out = append(out, at.Format(time.RFC3339))
	}
	return out
}

func TestScheduleCronDST(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, expr, zone, from string
		want                   []string
	}{
		{"spring forward: 02:30 does not exist, runs once at 03:00 EDT",
			"30 2 * * *", "America/New_York", "2026-03-07T02:30:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"}},
		{"fall back: 01:30 happens twice, runs once at the first (EDT)",
			"30 1 * * *", "America/New_York", "2026-10-31T01:30:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00", "2026-11-03T01:30:00-05:00"}},
		{"fall back: from the first 01:30 the next is the next day, not 01:30 EST",
			"30 1 * * *", "America/New_York", "2026-11-01T01:30:00-04:00",
			[]string{"2026-11-02T01:30:00-05:00"}},
		{"fall back: from inside the repeated hour (EST) nothing repeats",
			"30 1 * * *", "America/New_York", "2026-11-01T01:10:00-05:00",
			[]string{"2026-11-02T01:30:00-05:00"}},
		{"every 15 minutes across the gap: the skipped matches run once",
			"*/15 * * * *", "America/New_York", "2026-03-08T01:40:00-05:00",
			[]string{"2026-03-08T01:45:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:15:00-04:00"}},
		{"every 30 minutes across the fold: the repeated hour runs twice (interval schedule)",
			"*/30 * * * *", "America/New_York", "2026-11-01T00:45:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"New York */15 from 05:00Z on the fall-back day: no 75-minute gap",
			"*/15 * * * *", "America/New_York", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T01:15:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:45:00-04:00",
				"2026-11-01T01:00:00-05:00", "2026-11-01T01:15:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T01:45:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"New York hourly from inside the repeated hour (EST): the next is 02:00 EST",
			"0 * * * *", "America/New_York", "2026-11-01T01:10:00-05:00",
			[]string{"2026-11-01T02:00:00-05:00"}},
		{"New York hourly from the first 01:30: 01:00 EST comes next",
			"0 * * * *", "America/New_York", "2026-11-01T01:30:00-04:00",
			[]string{"2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"New York hours 1-2 at :30, fixed minute but several hours: both 01:30",
			"30 1-2 * * *", "America/New_York", "2026-11-01T00:00:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00", "2026-11-02T01:30:00-05:00"}},
		{"London fall back: */30 runs through the repeated hour",
			"*/30 * * * *", "Europe/London", "2026-10-25T00:45:00+01:00",
			[]string{"2026-10-25T01:00:00+01:00", "2026-10-25T01:30:00+01:00", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"}},
		{"London fall back: 01:30 fixed runs once",
			"30 1 * * *", "Europe/London", "2026-10-24T12:00:00+01:00",
			[]string{"2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00Z"}},
		{"London spring forward: */30 runs once at 02:00 BST for the skipped hour",
			"*/30 * * * *", "Europe/London", "2026-03-29T00:45:00Z",
			[]string{"2026-03-29T02:00:00+01:00", "2026-03-29T02:30:00+01:00"}},
		{"London spring forward: 01:30 fixed runs at 02:00 BST",
			"30 1 * * *", "Europe/London", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"}},
		{"Lord Howe 30-minute fall back: */15 runs the repeated half hour twice",
			"*/15 * * * *", "Australia/Lord_Howe", "2026-04-05T01:40:00+11:00",
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"}},
		{"Lord Howe 30-minute spring forward: */15 runs once after the gap",
			"*/15 * * * *", "Australia/Lord_Howe", "2026-10-04T01:50:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"}},
		{"Chicago Saturday 02:00 across fall back",
			"0 2 * * 6", "America/Chicago", "2026-10-31T02:00:00-05:00",
			[]string{"2026-11-07T02:00:00-06:00", "2026-11-14T02:00:00-06:00"}},
		{"Lord Howe 30-minute spring forward: 02:15 runs at 02:30",
			"15 2 * * *", "Australia/Lord_Howe", "2026-10-03T02:15:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"Lord Howe 30-minute fall back: 01:45 runs once",
			"45 1 * * *", "Australia/Lord_Howe", "2026-04-04T01:45:00+11:00",
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"Lord Howe daily at midnight across both changes",
			"@daily", "Australia/Lord_Howe", "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T00:00:00+11:00", "2026-04-06T00:00:00+10:30"}},
		{"every 8 hours from 00:30 EDT on the 2024 fall-back day",
			"0 */8 * * *", "America/New_York", "2024-11-03T00:30:00-04:00",
			[]string{"2024-11-03T08:00:00-05:00", "2024-11-03T16:00:00-05:00", "2024-11-04T00:00:00-05:00", "2024-11-04T08:00:00-05:00"}},
		{"@every is epoch-aligned and ignores wall clocks",
			"@every 2h", "America/New_York", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:00:00-05:00", "2026-11-01T03:00:00-05:00", "2026-11-01T05:00:00-05:00"}},
		{"day of month OR day of week when both are restricted (Vixie cron)",
			"0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z",
			[]string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"}},
		{"Sunday as 7, weekly descriptor",
			"0 12 * * 7", "UTC", "2026-03-01T12:00:00Z",
			[]string{"2026-03-08T12:00:00Z"}},
		{"leap day", "0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, nextN(t, tc.expr, tc.zone, tc.from, len(tc.want)))
		})
	}
}

// TestScheduleCronNoLoop walks a year of hourly ticks through every DST
// change of several zones: each tick is later than the one before.
func TestScheduleCronNoLoop(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"America/New_York", "Australia/Lord_Howe", "Europe/London", "America/Santiago", "Asia/Tehran"} {
		for _, expr := range []string{"0 */8 * * *", "*/20 * * * *", "30 1,2 * * *"} {
			c, err := jobspec.ParseCron(expr)
			require.NoError(t, err)
			loc := mustLoc(t, zone)
			at := time.Date(2024, 1, 1, 0, 0, 0, 0, loc)
			for range 3000 {
				next := c.Next(at, loc)
				require.True(t, next.After(at), "%s in %s after %s: %s", expr, zone, at, next)
				at = next
			}
		}
	}
}

func TestScheduleCronRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ expr, want string }{
		{"", "empty schedule"},
		{"TZ=", "time zone prefix"},
		{"TZ=TZ=x", "time zone prefix"},
		{"CRON_TZ=Nowhere/City * * * * *", "timezone key"},
		{"cron_tz=UTC * * * * *", "time zone prefix"},
		{"* * * * * * *", "7 fields, expected 5"},
		{"* * * * * *", "6 fields"},
		{"* * * *", "4 fields"},
		{"*/0 * * * *", "invalid schedule"},
		{"60 * * * *", "invalid schedule"},
		{"0 24 * * *", "invalid schedule"},
		{"0 0 30 2 *", "matches no day"},
		{"@every", "@every DURATION"},
		{"@every 0s", "at least 1s"},
		{"@every -5m", "at least 1s"},
		{"@every 1.5s", "whole number of seconds"},
		{"@every soon", "not a duration"},
		{"@fortnightly", "not a descriptor: expected one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, or \"@every DURATION\""},
		{"@hourlly", "not a descriptor"},
		{"@daily extra", "invalid schedule"},
	} {
		_, err := jobspec.ParseCron(tc.expr)
		require.Error(t, err, tc.expr)
		require.Contains(t, err.Error(), tc.want, tc.expr)
		require.False(t, strings.Contains(err.Error(), "\n"), tc.expr)
	}
}
