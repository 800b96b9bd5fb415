package hooks

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDecision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    error
		contain string
	}{
		{in: `{"decision":"allow"}`},
		{in: " \n{\"decision\":\"allow\"}\n"},
		{in: `{"decision":"deny","reason":"no"}`},
		{in: `{"decision":"adjust","reason":"r","job":{"argv":["a"],"env":{},"cwd":"/x","mode":"read_only","network":false,"writable":[],"timeout_s":3}}`},
		{in: ``, want: ErrBadDecision, contain: "empty output"},
		{in: `null`, want: ErrBadDecision, contain: "null"},
		{in: `[]`, want: ErrBadDecision},
		{in: `{"decision":"allow"} x`, want: ErrBadDecision, contain: "trailing"},
		{in: `{"decision":"allow"}{}`, want: ErrBadDecision, contain: "trailing"},
		{in: `{}`, want: ErrBadDecision, contain: `missing "decision"`},
		{in: `{"decision":"ALLOW"}`, want: ErrBadDecision, contain: "unknown decision"},
		{in: `{"decision":"allow","reason":null}`, want: ErrBadDecision, contain: "null"},
		{in: `{"decision":"allow","why":"x"}`, want: ErrBadDecision, contain: `unknown field "why"`},
		{in: `{"decision":"deny","reason":"  "}`, want: ErrBadDecision, contain: "without a reason"},
		{in: `{"decision":"adjust","reason":"r"}`, want: ErrBadDecision, contain: `adjust without "job"`},
		{in: `{"decision":"allow","job":{}}`, want: ErrBadDecision, contain: "only valid with adjust"},
		{in: `{"decision":"adjust","reason":"r","job":{"id":"x"}}`, want: ErrBadDecision, contain: "not adjustable"},
		{in: `{"decision":"adjust","reason":"r","job":{"argv":"ls"}}`, want: ErrBadDecision, contain: `"argv"`},
		{in: `{"decision":"adjust","reason":"r","job":{"argv":null}}`, want: ErrBadDecision, contain: "null"},
		{in: `{"decision":"adjust","reason":"r","job":{"colour":1}}`, want: ErrBadDecision, contain: "unknown field"},
		{in: `{"decision":"adjust","reason":"r","job":{"unix_sockets":"yes"}}`, want: ErrBadDecision, contain: `"unix_sockets"`},
		{in: `{"decision":"adjust","reason":"r","job":{"unix_sockets":false}}`},
	} {
		_, err := ParseDecision([]byte(tc.in))
		if tc.want == nil {
			require.NoError(t, err, tc.in)
			continue
		}
		require.ErrorIs(t, err, tc.want, tc.in)
		require.ErrorContains(t, err, tc.contain, tc.in)
	}
}

func TestApplyAdjustment(t *testing.T) {
	t.Parallel()
	base := Job{Argv: []string{"ls"}, Mode: "workspace_write", Network: false, Writable: []string{"/data"}, Env: map[string]string{"A": "1"},
		Protect: []string{".env"}, Hide: []string{"/srv/keys"}}
	str := func(s string) *string { return &s }
	yes, no := true, false
	neg := -1.0
	for _, tc := range []struct {
		name     string
		a        Adjustment
		mayWiden bool
		want     error
		check    func(t *testing.T, j Job)
	}{
		{name: "narrow mode", a: Adjustment{Mode: str("read_only")}, check: func(t *testing.T, j Job) { require.Equal(t, "read_only", j.Mode) }},
		{name: "same mode", a: Adjustment{Mode: str("workspace_write")}},
		{name: "wider mode", a: Adjustment{Mode: str("danger_full_access")}, want: ErrWiden},
		{name: "wider mode allowed", a: Adjustment{Mode: str("danger_full_access")}, mayWiden: true},
		{name: "unknown mode", a: Adjustment{Mode: str("yolo")}, mayWiden: true, want: ErrBadDecision},
		{name: "network on", a: Adjustment{Network: &yes}, want: ErrWiden},
		{name: "network off", a: Adjustment{Network: &no}},
		{name: "unix sockets on", a: Adjustment{UnixSockets: &yes}, want: ErrWiden},
		{name: "unix sockets on allowed", a: Adjustment{UnixSockets: &yes}, mayWiden: true, check: func(t *testing.T, j Job) { require.True(t, j.UnixSockets) }},
		{name: "unix sockets off", a: Adjustment{UnixSockets: &no}, check: func(t *testing.T, j Job) { require.False(t, j.UnixSockets) }},
		{name: "writable under", a: Adjustment{Writable: []string{"/data/sub", "/data"}}},
		{name: "writable none", a: Adjustment{Writable: []string{}}, check: func(t *testing.T, j Job) { require.Empty(t, j.Writable) }},
		{name: "writable new", a: Adjustment{Writable: []string{"/etc"}}, want: ErrWiden},
		{name: "writable sibling prefix", a: Adjustment{Writable: []string{"/database"}}, want: ErrWiden},
		{name: "writable relative", a: Adjustment{Writable: []string{"data"}}, mayWiden: true, want: ErrBadDecision},
		{name: "argv empty", a: Adjustment{Argv: []string{}}, want: ErrBadDecision},
		{name: "argv relative", a: Adjustment{Argv: []string{"bin/ls"}}, want: ErrBadDecision},
		{name: "argv NUL", a: Adjustment{Argv: []string{"ls", "a\x00b"}}, want: ErrBadDecision},
		{name: "argv bare name", a: Adjustment{Argv: []string{"ls", "-l"}}},
		{name: "argv absolute", a: Adjustment{Argv: []string{"/bin/ls"}}},
		{name: "cwd relative", a: Adjustment{Cwd: str("sub")}, want: ErrBadDecision},
		{name: "env bad name", a: Adjustment{Env: map[string]string{"A=B": "1"}}, want: ErrBadDecision},
		{name: "env replaced", a: Adjustment{Env: map[string]string{}}, check: func(t *testing.T, j Job) { require.Empty(t, j.Env) }},
		{name: "timeout negative", a: Adjustment{TimeoutS: &neg}, want: ErrBadDecision},
		{name: "protect more", a: Adjustment{Protect: []string{".env", "Makefile"}}, check: func(t *testing.T, j Job) { require.Equal(t, []string{".env", "Makefile"}, j.Protect) }},
		{name: "protect dropped", a: Adjustment{Protect: []string{"Makefile"}}, want: ErrWiden},
		{name: "protect dropped allowed", a: Adjustment{Protect: []string{}}, mayWiden: true, check: func(t *testing.T, j Job) { require.Empty(t, j.Protect) }},
		{name: "protect empty entry", a: Adjustment{Protect: []string{".env", ""}}, want: ErrBadDecision},
		{name: "hide more", a: Adjustment{Hide: []string{"/srv/keys", "/home/u/.pgpass"}}, check: func(t *testing.T, j Job) { require.Len(t, j.Hide, 2) }},
		{name: "hide dropped", a: Adjustment{Hide: []string{}}, want: ErrWiden},
		{name: "hide relative", a: Adjustment{Hide: []string{"/srv/keys", ".env"}}, want: ErrBadDecision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, _, err := ApplyAdjustment(base, &tc.a, tc.mayWiden)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, j)
			}
			require.Equal(t, []string{"/data"}, base.Writable, "input not modified")
		})
	}
	// An unknown current mode counts as read_only.
	_, _, err := ApplyAdjustment(Job{}, &Adjustment{Mode: str("workspace_write")}, false)
	require.ErrorIs(t, err, ErrWiden)
}

// TestSandboxAndJobOnTheWire: the request's sandbox section carries the
// network decision and the hidden and protected paths, and the job its
// protect and hide lists, as [] rather than null when empty.
func TestSandboxAndJobOnTheWire(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(wireRequest{Job: Job{}.Wire(), Sandbox: SandboxInfo{Network: true}.wire()})
	require.NoError(t, err)
	s := string(b)
	require.Contains(t, s, `"sandbox":{"grade":"","executable":"","argv":[],"network":true,"hidden":[],"protected":[]}`)
	require.Contains(t, s, `"protect":[],"hide":[]`)
	b, err = json.Marshal(SandboxInfo{Hidden: []string{"/h/.ssh"}, Protected: []string{"/w/.git/hooks"}}.wire())
	require.NoError(t, err)
	require.Contains(t, string(b), `"hidden":["/h/.ssh"],"protected":["/w/.git/hooks"]`)
}
