package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// exerciseEnqueue runs the subtests of enqueue, names and whole-or-nothing batches.
func exerciseEnqueue(t *testing.T, setup func(t *testing.T) *testBundle) {
	t.Run("EnqueueGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		src := "[[job]]\nname = \"a\"\ncommand = \"echo a\"\n[[job]]\ncommand = [\"true\"]\n"
		specs, err := jobspec.Parse("jobs.toml", []byte(src), "/srv")
		require.NoError(t, err)
		jobs, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: specs, Source: src, SourcePath: "/srv/jobs.toml"})
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		require.Less(t, jobs[0].ID, jobs[1].ID, "ids sort by creation")
		for _, ref := range []string{jobs[0].ID, "a"} {
			j, err := b.st.JobGet(b.ctx, ref)
			require.NoError(t, err)
			require.Equal(t, jobs[0].ID, j.ID)
			require.Equal(t, queue.StateQueued, j.State)
			require.Empty(t, j.Source, "JobGet leaves the source to JobSourceGet")
			text, err := b.st.JobSourceGet(b.ctx, j.ID)
			require.NoError(t, err)
			require.Equal(t, src, text)
			require.Equal(t, "/srv/jobs.toml", j.SourcePath)
			require.Equal(t, specs[0], j.Spec)
			require.Equal(t, T0, j.CreatedAt)
			require.Equal(t, 1, j.MaxAttempts)
		}
		j, err := b.st.JobGet(b.ctx, jobs[1].ID)
		require.NoError(t, err)
		require.Equal(t, "", j.Name)
		_, err = b.st.JobGet(b.ctx, "nope")
		require.ErrorIs(t, err, queue.ErrNotFound)
		_, err = b.st.JobGet(b.ctx, "")
		require.ErrorIs(t, err, queue.ErrNotFound)
	})

	t.Run("NameRules", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		_, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "n", Command: []string{"true"}}}})
		require.ErrorIs(t, err, queue.ErrNameInUse)
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		var verr *jobspec.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Len(t, verr.Errors, 1)
		require.Equal(t, `job "n"`, verr.Errors[0].Job)
		require.ErrorContains(t, err, first.ID)
		require.ErrorContains(t, err, "the name is free again once that job is final")
		require.Equal(t, 1, strings.Count(err.Error(), "queue:")+strings.Count(err.Error(), "jobspec:"), "a package prefix, said once: %v", err)
		b.runOnce(t, "w", queue.OutcomeSucceeded)
		b.clock.Advance(time.Second)
		second := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		j, err := b.st.JobGet(b.ctx, "n")
		require.NoError(t, err)
		require.Equal(t, second.ID, j.ID, "a name resolves to the newest job")
		j, err = b.st.JobGet(b.ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, queue.StateSucceeded, j.State)
	})

	// Retrying a job whose name a newer job holds is refused in enqueue's
	// words: the holder's state and id, and when the name is free again
	// (it once said only "is held by job ID").
	t.Run("RetryNameInUse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		_, err := b.st.JobCancel(b.ctx, old.ID)
		require.NoError(t, err)
		holder := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		held := func(state string) string {
			return `"n" is held by ` + state + ` job ` + holder.ID + `; the name is free again once that job is final (wait for it, or cancel it)`
		}
		_, err = b.st.JobRetry(b.ctx, old.ID)
		require.ErrorIs(t, err, queue.ErrNameInUse)
		require.EqualError(t, err, "queue: "+held("queued"))
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "n", Command: []string{"true"}}}})
		require.ErrorContains(t, err, held("queued"), "enqueue says it in the same words")
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		_, err = b.st.JobRetry(b.ctx, old.ID)
		require.ErrorIs(t, err, queue.ErrNameInUse)
		require.EqualError(t, err, "queue: "+held("running"))
		_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: holder.ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		require.NoError(t, err)
		j, err := b.st.JobRetry(b.ctx, old.ID)
		require.NoError(t, err, "the name is free once its holder is final")
		require.Equal(t, queue.StateQueued, j.State)
	})

	t.Run("BatchRefusedWhole", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			{Name: "ok", Command: []string{"true"}},
			{Name: "bad", Command: []string{"true"}, After: []string{"ghost"}},
			{Name: "worse", Command: []string{"true"}, Mode: "yolo"},
		}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		var verr *jobspec.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Len(t, verr.Errors, 1, "spec errors are reported before store lookups")
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			{Name: "ok", Command: []string{"true"}},
			{Name: "bad", Command: []string{"true"}, After: []string{"ghost"}},
			{Name: "bad2", Command: []string{"true"}, After: []string{"ok", "phantom"}},
		}})
		require.ErrorAs(t, err, &verr)
		require.Len(t, verr.Errors, 2)
		require.ErrorContains(t, err, "ghost")
		require.ErrorContains(t, err, "phantom")
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			{Name: "p", Command: []string{"true"}, After: []string{"q"}},
			{Name: "q", Command: []string{"true"}, After: []string{"p"}},
		}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		require.ErrorContains(t, err, "dependency cycle")
		counts, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		for _, st := range queue.JobStates() {
			require.Zero(t, counts[st], st)
		}
		_, err = b.st.JobGet(b.ctx, "ok")
		require.ErrorIs(t, err, queue.ErrNotFound)
	})

	t.Run("EnqueueAllWholeOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		one := &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}}}, SourcePath: "/srv/one.toml"}
		for _, bad := range []*queue.JobEnqueueParams{
			{Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Line: 4}}, SourcePath: "/srv/dup.toml"},
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, After: []string{"ghost"}}}, SourcePath: "/srv/ghost.toml"},
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, Mode: "yolo"}}, SourcePath: "/srv/mode.toml"},
		} {
			_, err := b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one, bad})
			require.ErrorIs(t, err, jobspec.ErrInvalid, bad.SourcePath)
			require.ErrorContains(t, err, bad.SourcePath)
			_, err = b.st.JobGet(b.ctx, "one")
			require.ErrorIs(t, err, queue.ErrNotFound, "the first batch of %s was stored", bad.SourcePath)
		}
		_, err := b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one, {Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Line: 4}}, SourcePath: "/srv/dup.toml"}})
		require.ErrorContains(t, err, `/srv/dup.toml:4: job "one": name: duplicate name "one": a job or schedule of /srv/one.toml has it too`)
		// SourceName, when set, names the batch in messages instead of
		// SourcePath, whichever check finds the problem.
		for _, second := range []jobspec.Spec{
			{Name: "one", Command: []string{"true"}, Line: 4},
			{Name: "two", Command: []string{"true"}, After: []string{"ghost"}, Line: 4},
			{Name: "two", Command: []string{"true"}, Mode: "yolo", Line: 4},
			{Name: "two", Command: []string{"true"}, Schedule: "@daily", Mode: "yolo", Line: 4},
		} {
			_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{
				{Specs: one.Specs, SourcePath: "/srv/one.toml", SourceName: "one.toml"},
				{Specs: []jobspec.Spec{second}, SourcePath: "/srv/dup.toml", SourceName: "./dup.toml"}})
			require.ErrorIs(t, err, jobspec.ErrInvalid)
			require.ErrorContains(t, err, `./dup.toml:4: job "`+second.Name+`": `)
			require.NotContains(t, err.Error(), "/srv/", "SourcePath in a message")
		}
		require.ErrorContains(t, err, `./dup.toml:4: job "two": mode:`)
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{
			{Specs: one.Specs, SourcePath: "/srv/one.toml", SourceName: "one.toml"},
			{Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Line: 4}}, SourcePath: "/srv/dup.toml", SourceName: "./dup.toml"}})
		require.ErrorContains(t, err, `./dup.toml:4: job "one": name: duplicate name "one": a job or schedule of one.toml has it too`)
		_, err = b.st.JobEnqueueAll(b.ctx, nil)
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		// A schedule given twice: the second would replace the first.
		hourly := &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "s", Command: []string{"true"}, Schedule: "@hourly", Line: 2}}, SourcePath: "/srv/s1.toml"}
		daily := &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "s", Command: []string{"false"}, Schedule: "@daily", Line: 3}}, SourcePath: "/srv/s2.toml"}
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{hourly, daily})
		require.ErrorContains(t, err, `/srv/s2.toml:3: job "s": name: duplicate name "s": a job or schedule of /srv/s1.toml:2 has it too`)
		// A job and a schedule of the same name, in two batches, as in one.
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one, {Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Schedule: "@daily"}}}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		require.ErrorContains(t, err, `duplicate name "one"`)
		scheds, err := b.st.ScheduleList(b.ctx, &queue.ScheduleListParams{})
		require.NoError(t, err)
		require.Empty(t, scheds)

		// An earlier batch's after naming a job of a later one says so.
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, After: []string{"one"}, Line: 1}}, SourcePath: "/srv/two.toml"}, one})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		require.ErrorContains(t, err, `/srv/two.toml:1: job "two": after: "one" is a job of /srv/one.toml, which comes later in this submission: list it first`)
		_, err = b.st.JobGet(b.ctx, "one")
		require.ErrorIs(t, err, queue.ErrNotFound)

		// A later batch's after names a job of an earlier one; a schedule
		// may share a name with nothing here but is not a job.
		got, err := b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one,
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, After: []string{"one"}}}}})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Len(t, got[0], 1)
		require.Len(t, got[1], 1)
		require.Equal(t, []string{got[0][0].ID}, got[1][0].DependsOn)
		require.Equal(t, 1, got[1][0].DepsPending)
		j, err := b.st.JobGet(b.ctx, "two")
		require.NoError(t, err)
		require.Equal(t, []string{got[0][0].ID}, j.DependsOn)
	})
}
