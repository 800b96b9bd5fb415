package jobspec

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below on hosts without /usr/share/zoneinfo
)

// FuzzParseCron checks that ParseCron never panics, that an error is one
// line, and that an accepted expression yields strictly increasing ticks
// across daylight-saving changes. The seed corpus is in
// testdata/fuzz/FuzzParseCron.
//
//	go test -run '^$' -fuzz FuzzParseCron -fuzztime 60s ./jobspec
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{
		"TZ=", "TZ=TZ=x", "CRON_TZ=Nowhere/City * * * * *", "* * * * * * *", "*/0 * * * *", "60 * * * *",
		"30 2 * * *", "0 */8 * * *", "@every 2s", "@daily", "0 0 13 * FRI", "1-5/2 * * JAN-MAR MON-FRI",
	} {
		f.Add(s)
	}
	zones := []*time.Location{time.UTC}
	for _, z := range []string{"America/New_York", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(z)
		if err != nil {
			f.Fatal(err)
		}
		zones = append(zones, loc)
	}
	starts := []time.Time{
		time.Date(2026, 3, 8, 1, 59, 0, 0, time.UTC),
		time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC),
		time.Date(2026, 10, 3, 15, 0, 0, 0, time.UTC),
	}
	f.Fuzz(func(t *testing.T, expr string) {
		c, err := ParseCron(expr)
		if err != nil {
			if c != nil {
				t.Fatal("error with a schedule")
			}
			for _, r := range err.Error() {
				if r == '\n' {
					t.Fatalf("multi-line error: %q", err)
				}
			}
			return
		}
		for _, loc := range zones {
			for _, at := range starts {
				for range 5 {
					next := c.Next(at, loc)
					if !next.After(at) {
						t.Fatalf("%q in %s: Next(%s) = %s", expr, loc, at, next)
					}
					at = next
				}
			}
		}
	})
}
