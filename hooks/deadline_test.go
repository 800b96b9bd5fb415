package hooks

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostileWatModules runs the hand-written hostile modules of
// testdata/wat: work without any loop (double recursion, a chain of
// distinct functions), spinning in host calls (sleeps, random bytes),
// bulk memory instructions in straight-line code, memory grown past the
// limit then an allow, and recursion 100 million calls deep. Each must be
// denied for the right cause within twice its timeout, and the same chain must then decide the next job
// normally. A module that escaped its deadline would run for hours: the
// test gives up after ten timeouts instead of hanging.
func TestHostileWatModules(t *testing.T) {
	const timeout = time.Second
	cases := []struct {
		mod     string
		abi     string
		memory  uint64
		want    error
		contain string
	}{
		{mod: "fib-command", abi: ABICommand, want: ErrTimeout, contain: "did not finish within 1s"},
		{mod: "fib-reactor", abi: ABIReactor, want: ErrTimeout, contain: "did not finish within 1s"},
		{mod: "chain-reactor", abi: ABIReactor, want: ErrTimeout},
		{mod: "sleep-reactor", abi: ABIReactor, want: ErrTimeout},
		{mod: "random-command", abi: ABICommand, want: ErrTimeout},
		{mod: "bulk-reactor", abi: ABIReactor, want: ErrTimeout},
		{mod: "grow-command", abi: ABICommand, memory: 8 << 20, want: ErrMemory, contain: "grew past its memory limit of 8 MiB"},
		{mod: "grow-reactor", abi: ABIReactor, memory: 8 << 20, want: ErrMemory, contain: "grew past its memory limit of 8 MiB"},
		{mod: "deep-command", abi: ABICommand, want: ErrCallStack, contain: "deeper than 8 MiB of stack"},
		{mod: "deep-reactor", abi: ABIReactor, want: ErrCallStack, contain: "deeper than 8 MiB of stack"},
	}
	for _, tc := range cases {
		t.Run(tc.mod, func(t *testing.T) {
			c := newTestChain(t, ChainOptions{Hooks: []Config{{
				Name: tc.mod, Path: wasmPath(t, "wat/"+tc.mod), Timeout: timeout, MemoryBytes: tc.memory,
				OnError: OnErrorDeny,
			}}})
			require.Equal(t, tc.abi, c.Hooks()[0].ABI)

			res, took := decideWithin(t, c, testJob("", "echo", "~hostile"), 10*timeout)
			t.Logf("%s: denied after %v: %s", tc.mod, took.Round(time.Millisecond), res.Reason)
			require.Equal(t, VerdictDeny, res.Verdict)
			e := res.Trail[0]
			require.True(t, strings.HasPrefix(e.Error, tc.want.Error()), "error %q should start with %q", e.Error, tc.want)
			require.Contains(t, e.Error, tc.contain)
			require.Less(t, took, 2*timeout, "denied later than twice the timeout")

			res, _ = decideWithin(t, c, testJob("", "echo", "hello"), 10*timeout)
			require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
			require.Empty(t, res.Trail[0].Error)
		})
	}
}

// decideWithin is decide, failing the test (rather than hanging it) when
// the decision takes longer than limit.
func decideWithin(t *testing.T, c *Chain, j Job, limit time.Duration) (Result, time.Duration) {
	t.Helper()
	type outcome struct {
		res  Result
		took time.Duration
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		start := time.Now()
		res, err := c.Decide(context.Background(), DecideParams{Job: j})
		done <- outcome{res, time.Since(start), err}
	}()
	select {
	case o := <-done:
		require.NoError(t, o.err)
		return o.res, o.took
	case <-time.After(limit):
		// Not t.Fatalf: the chain's cleanup would wait for the decision,
		// which never ends.
		fmt.Fprintf(os.Stderr, "--- FAIL: %s: no decision after %v: the hook escaped its timeout\n", t.Name(), limit)
		os.Exit(1)
		return Result{}, 0
	}
}

// TestDeadlineInterruptsParentCancel: a decision stuck in recursion ends
// as soon as the caller's context does (a worker told to stop), not at the
// hook's timeout.
func TestDeadlineInterruptsParentCancel(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "fib", Path: wasmPath(t, "wat/fib-reactor"), Timeout: time.Hour}}})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Decide(ctx, DecideParams{Job: testJob("", "echo", "~hostile")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestFreshMemoryEachCall: a command hook gets a fresh, zeroed memory on
// every call, although paddock reuses the mappings of closed instances:
// nothing one decision wrote is seen by the next, in the initial memory,
// in memory grown, or past what a pooled mapping keeps resident.
func TestFreshMemoryEachCall(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "leftover", Path: wasmPath(t, "wat/leftover-command"), MemoryBytes: 32 << 20}}})
	for range 4 {
		res, _ := decide(t, c, testJob(""))
		require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
	}
}
