package jobspec

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// Cron is a parsed schedule expression: five cron fields (minute, hour,
// day of month, month, day of week), a descriptor (@yearly, @annually,
// @monthly, @weekly, @daily, @midnight, @hourly), or @every DURATION.
// Build one with [ParseCron]; the zero value is not usable. A Cron is
// immutable and safe for concurrent use.
//
// The fields are parsed by github.com/netresearch/go-cron (names such as
// MON or JAN, ranges, lists, steps; Sunday is 0 or 7). When both the
// day-of-month and the day-of-week fields are restricted a day matches
// either one, as in Vixie cron. Next times are computed here, on wall-clock
// time in the schedule's zone, with the daylight-saving rules of
// [Cron.Next].
type Cron struct {
	expr  string
	every time.Duration // > 0 for @every
	// Bit sets, bit n set when value n matches.
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool
}

// cronSearchYears bounds the search for the next matching day; a schedule
// that matches no day in that span (such as "0 0 30 2 *") is refused.
const cronSearchYears = 9

// maxCronLen bounds an expression's length, in bytes.
const maxCronLen = 256

const cronStarBit = 1 << 63

// cronDescriptors are the @ forms cronParser takes besides @every
// (netresearch/go-cron's parser.go, parseDescriptor).
var cronDescriptors = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor | cron.DowOrDom)

// ParseCron parses a schedule expression. It never panics; every error
// says what was expected. Refused: an empty expression, anything but five
// fields or a known descriptor, values out of range, a step of 0, a
// TZ= or CRON_TZ= prefix (the job file's timezone key sets the zone),
// an @every duration below one second or not a whole number of seconds,
// and a field combination that matches no day in nine years ("0 0 30 2 *").
func ParseCron(expr string) (*Cron, error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, errors.New(`empty schedule: expected five cron fields ("30 3 * * *"), @daily and friends, or "@every 10m"`)
	case len(e) > maxCronLen:
		return nil, fmt.Errorf("schedule longer than %d bytes", maxCronLen)
	case strings.ContainsRune(e, 0):
		return nil, errors.New("schedule contains a NUL byte")
	}
	if up := strings.ToUpper(e); strings.HasPrefix(up, "TZ=") || strings.HasPrefix(up, "CRON_TZ=") {
		return nil, fmt.Errorf(`time zone prefix in %q: set the zone with the timezone key (timezone = "Europe/Paris"), not in the expression`, e)
	}
	c := &Cron{expr: e}
	if rest, ok := strings.CutPrefix(e, "@every"); ok {
		s := strings.TrimSpace(rest)
		d, err := time.ParseDuration(s)
		switch {
		case s == "" || rest == s:
			return nil, fmt.Errorf(`invalid schedule %q: expected "@every DURATION", e.g. "@every 10m"`, e)
		case err != nil:
			return nil, fmt.Errorf(`invalid schedule %q: %q is not a duration like "90s" or "1h30m"`, e, s)
		case d < time.Second:
			return nil, fmt.Errorf("invalid schedule %q: @every needs at least 1s", e)
		case d%time.Second != 0:
			return nil, fmt.Errorf("invalid schedule %q: @every needs a whole number of seconds", e)
		}
		c.every = d
		return c, nil
	}
	if !strings.HasPrefix(e, "@") {
		if n := len(strings.Fields(e)); n != 5 {
			return nil, fmt.Errorf("invalid schedule %q: %d fields, expected 5 (minute hour day-of-month month day-of-week)", e, n)
		}
	}
	sched, err := parseWithLibrary(e)
	if err != nil && strings.HasPrefix(e, "@") {
		return nil, fmt.Errorf("invalid schedule %q: not a descriptor: expected one of %s, or \"@every DURATION\"", e, strings.Join(cronDescriptors, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("invalid schedule %q: %s", e, err)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok || len(spec.DomConstraints) > 0 || len(spec.DowConstraints) > 0 || spec.Year != nil {
		return nil, fmt.Errorf("invalid schedule %q: unsupported form", e)
	}
	c.minute, c.hour, c.month = spec.Minute&^cronStarBit, spec.Hour&^cronStarBit, spec.Month&^cronStarBit
	c.dom, c.dow = spec.Dom&^cronStarBit, spec.Dow&^cronStarBit
	c.domStar, c.dowStar = spec.Dom&cronStarBit != 0, spec.Dow&cronStarBit != 0
	if c.dow&(1<<7) != 0 { // Sunday as 7
		c.dow |= 1
	}
	if c.minute&(1<<60-1) == 0 || c.hour&(1<<24-1) == 0 || c.month&(0x1fff&^1) == 0 || c.dom&(1<<32-2) == 0 && c.dow&0x7f == 0 {
		return nil, fmt.Errorf("invalid schedule %q: a field matches no value", e)
	}
	ref := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := c.nextDay(civilDay(ref), cronSearchYears*366); !ok {
		return nil, fmt.Errorf("invalid schedule %q: it matches no day (checked %d years ahead)", e, cronSearchYears)
	}
	return c, nil
}

// parseWithLibrary calls the library and turns a panic into an error, so
// that a bug there cannot take down a worker reading a job file.
func parseWithLibrary(e string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("unparsable (%v)", r)
		}
	}()
	return cronParser.Parse(e)
}

// String returns the expression as given (trimmed).
func (c *Cron) String() string { return c.expr }

// Every returns the interval of an @every schedule, or 0.
func (c *Cron) Every() time.Duration { return c.every }

// Next returns the first tick strictly after t, in loc (UTC when nil).
//
// An @every D schedule ticks at every whole multiple of D since the Unix
// epoch (so "@every 1h" ticks on the hour, UTC), whatever the zone.
//
// Other schedules match wall-clock minutes in loc:
//
//   - a time that does not exist (skipped when clocks spring forward) runs
//     once, at the first instant after the gap (02:30 on a day New York
//     jumps from 02:00 to 03:00 runs at 03:00 EDT; several skipped matches
//     of one gap run once);
//   - a time that happens twice (clocks fall back) runs once, at its
//     first occurrence, when the hour field is a single value (a
//     fixed-time schedule: "30 1 * * *" runs at 01:30 EDT, not again at
//     01:30 EST);
//   - when the hour field matches several hours (an interval-style
//     schedule: "*/15 * * * *", "0 */2 * * *", @hourly) it runs at every
//     matching instant of elapsed time, both occurrences of the repeated
//     hour included: "*/15 * * * *" runs at 01:00, 01:15, 01:30, 01:45 EDT
//     and again at 01:00 ... 01:45 EST, with no 75-minute gap. This is
//     Vixie cron's split between wildcard and fixed-time jobs (cron(8),
//     "Daylight Saving Time and other time changes").
//
// Next returns the zero time when nothing matches in the next nine years
// (ParseCron refuses such expressions, so only a far-off t can see it).
func (c *Cron) Next(t time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	if c.every > 0 {
		u := t.UnixNano()
		d := int64(c.every)
		k := u / d
		if u < 0 && u%d != 0 {
			k-- // floor for times before 1970
		}
		return time.Unix(0, (k+1)*d).In(loc)
	}
	// Wall-clock minute of t, as a UTC time (the "civil" scale), then scan
	// matching civil minutes after it.
	cv := wallOf(t.In(loc)).Truncate(time.Minute).Add(time.Minute)
	if c.interval() && fallBackNear(t, loc) {
		return c.nextThroughFold(t, cv, loc)
	}
	for range 4 * 24 * 60 { // candidates mapping to <= t are few (one fall-back hour)
		m, ok := c.nextCivil(cv)
		if !ok {
			return time.Time{}
		}
		if at := firstAtOrAfter(m, loc); at.After(t) {
			return at
		}
		cv = m.Add(time.Minute)
	}
	return time.Time{}
}

// maxFold bounds how far clocks go back at once anywhere (an hour in most
// zones, 30 minutes on Lord Howe Island; two hours at most in the tz
// database), with a margin.
const maxFold = 3 * time.Hour

// interval reports whether the hour field matches more than one hour: the
// schedule runs through a repeated hour (see [Cron.Next]).
func (c *Cron) interval() bool { return bits.OnesCount64(c.hour&(1<<24-1)) > 1 }

// fallBackNear reports whether loc's clocks go back within two days after
// t (or went back at most maxFold before it).
func fallBackNear(t time.Time, loc *time.Location) bool {
	x := t.Add(-maxFold)
	for range 4 {
		xl := x.In(loc)
		_, off := xl.Zone()
		_, end := xl.ZoneBounds()
		if end.IsZero() || end.After(t.Add(48*time.Hour)) {
			return false
		}
		if _, after := end.In(loc).Zone(); after < off {
			return true
		}
		x = end
	}
	return false
}

// nextThroughFold is Next for an interval schedule near a fall-back: every
// instant whose wall reading matches counts, so the civil scan starts
// maxFold before t's reading (a repeated minute can be after t) and takes
// the earliest instant after t among all readings of each matching minute.
func (c *Cron) nextThroughFold(t, cv time.Time, loc *time.Location) time.Time {
	var best, bestWall time.Time
	cv = cv.Add(-maxFold)
	for range 4 * 24 * 60 {
		m, ok := c.nextCivil(cv)
		if !ok || !best.IsZero() && m.After(bestWall.Add(maxFold)) {
			break
		}
		for _, at := range instantsOf(m, loc) {
			if at.After(t) && (best.IsZero() || at.Before(best)) {
				best, bestWall = at, m
			}
		}
		cv = m.Add(time.Minute)
	}
	return best
}

// instantsOf returns every instant whose wall reading in loc is the civil
// minute m (two in a repeated hour), or, for a minute in a gap, the first
// instant after it.
func instantsOf(m time.Time, loc *time.Location) []time.Time {
	var out []time.Time
	seen := map[int]bool{}
	for _, probe := range []time.Duration{-26 * time.Hour, -maxFold, 0, maxFold, 26 * time.Hour} {
		_, off := m.Add(probe).In(loc).Zone()
		if seen[off] {
			continue
		}
		seen[off] = true
		cand := m.Add(-time.Duration(off) * time.Second)
		if wallOf(cand.In(loc)).Equal(m) {
			out = append(out, cand.In(loc))
		}
	}
	if len(out) == 0 {
		return []time.Time{firstAtOrAfter(m, loc)}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return slices.CompactFunc(out, time.Time.Equal)
}

// wallOf returns t's wall-clock reading in its location, as a UTC time.
func wallOf(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// firstAtOrAfter returns the first instant whose wall-clock reading in loc
// is at or after the civil time m (a UTC time standing for a wall reading).
func firstAtOrAfter(m time.Time, loc *time.Location) time.Time {
	// Candidates: m read with each offset in force within two days of it.
	var best time.Time
	var transitions []time.Time
	x := m.Add(-48 * time.Hour)
	end := m.Add(48 * time.Hour)
	for i := 0; i < 16 && x.Before(end); i++ {
		xl := x.In(loc)
		_, off := xl.Zone()
		cand := m.Add(-time.Duration(off) * time.Second)
		if _, o2 := cand.In(loc).Zone(); o2 == off && (best.IsZero() || cand.Before(best)) {
			best = cand
		}
		_, zEnd := xl.ZoneBounds()
		if zEnd.IsZero() || !zEnd.After(x) {
			break
		}
		transitions = append(transitions, zEnd)
		x = zEnd
	}
	if !best.IsZero() {
		return best.In(loc)
	}
	// m falls in a gap: the first instant after it is the transition whose
	// wall reading jumps over m.
	for _, tr := range transitions {
		before := wallOf(tr.Add(-time.Nanosecond).In(loc))
		at := wallOf(tr.In(loc))
		if before.Before(m) && !at.Before(m) {
			return tr.In(loc)
		}
	}
	// Unreachable with real zone data; fall back to Go's reading.
	return time.Date(m.Year(), m.Month(), m.Day(), m.Hour(), m.Minute(), 0, 0, loc)
}

// civilDay truncates a civil (UTC-scale) time to its day.
func civilDay(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

func (c *Cron) dayMatches(d time.Time) bool {
	if c.month&(1<<uint(d.Month())) == 0 {
		return false
	}
	domOK := c.dom&(1<<uint(d.Day())) != 0
	dowOK := c.dow&(1<<uint(d.Weekday())) != 0
	if c.domStar || c.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// nextDay returns the first matching day at or after d, looking at most
// limit days ahead.
func (c *Cron) nextDay(d time.Time, limit int) (time.Time, bool) {
	for range limit {
		if c.dayMatches(d) {
			return d, true
		}
		d = d.AddDate(0, 0, 1)
	}
	return time.Time{}, false
}

// nextCivil returns the first matching civil minute at or after cv. Every
// matching day has a matching minute (ParseCron refuses empty fields), so
// the loop ends on the first matching day after cv's day at the latest.
func (c *Cron) nextCivil(cv time.Time) (time.Time, bool) {
	day := civilDay(cv)
	h0, m0 := cv.Hour(), cv.Minute()
	for range 3 {
		d, ok := c.nextDay(day, cronSearchYears*366)
		if !ok {
			return time.Time{}, false
		}
		if !d.Equal(day) {
			h0, m0 = 0, 0
		}
		for h := h0; h < 24; h++ {
			if c.hour&(1<<uint(h)) == 0 {
				continue
			}
			start := 0
			if h == h0 {
				start = m0
			}
			if rest := c.minute >> uint(start); rest != 0 {
				if mi := start + bits.TrailingZeros64(rest); mi < 60 {
					return d.Add(time.Duration(h)*time.Hour + time.Duration(mi)*time.Minute), true
				}
			}
		}
		day = d.AddDate(0, 0, 1)
		h0, m0 = 0, 0
	}
	return time.Time{}, false
}
