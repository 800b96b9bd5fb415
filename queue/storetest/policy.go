package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// exercisePolicy runs the subtests of the queue's policy document: it is
// stored whole, its digest is the store's, and a claim under another
// digest is refused and claims nothing.
func exercisePolicy(t *testing.T, setup func(t *testing.T) *testBundle) {
	t.Run("PolicySetGetClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.PolicyGet(b.ctx)
		require.ErrorIs(t, err, queue.ErrPolicyNotSet)

		b.enqueue(t, jobspec.Spec{Name: "a", Command: []string{"true"}}, jobspec.Spec{Name: "b", Command: []string{"true"}})
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w"})
		require.NoError(t, err, "no policy set: the empty digest claims")
		require.Len(t, got, 1)

		src := "max_mode = \"read_only\"\n"
		set, err := b.st.PolicySet(b.ctx, &queue.PolicySetParams{Source: src, Path: "/etc/paddock/policy.toml"})
		require.NoError(t, err)
		sum := sha256.Sum256([]byte(src))
		want := hex.EncodeToString(sum[:])
		require.Equal(t, want, set.SHA256)
		require.False(t, set.SetAt.IsZero())
		read, err := b.st.PolicyGet(b.ctx)
		require.NoError(t, err)
		require.Equal(t, src, read.Source)
		require.Equal(t, "/etc/paddock/policy.toml", read.Path)
		require.Equal(t, want, read.SHA256)
		require.True(t, set.SetAt.Equal(read.SetAt))

		_, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "old"})
		require.ErrorIs(t, err, queue.ErrPolicyChanged, "a claimer with the old (empty) digest is refused")
		_, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "odd", PolicySHA256: "00"})
		require.ErrorIs(t, err, queue.ErrPolicyChanged)
		counts, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, counts[queue.StateQueued], "a refused claim claims nothing")

		got, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w2", PolicySHA256: want})
		require.NoError(t, err)
		require.Len(t, got, 1)
		j, err := b.st.JobGet(b.ctx, got[0].ID)
		require.NoError(t, err)
		require.Equal(t, want, j.Attempts[len(j.Attempts)-1].PolicySHA256, "the attempt records the policy it was claimed under")
		first, err := b.st.JobGet(b.ctx, "a")
		require.NoError(t, err)
		if first.ID == j.ID {
			first, err = b.st.JobGet(b.ctx, "b")
			require.NoError(t, err)
		}
		require.Equal(t, "", first.Attempts[0].PolicySHA256, "claimed before any policy")

		b.clock.Advance(time.Second)
		again, err := b.st.PolicySet(b.ctx, &queue.PolicySetParams{Source: "max_mode = \"workspace_write\"\n", Path: "/p.toml"})
		require.NoError(t, err)
		require.NotEqual(t, want, again.SHA256, "a new document replaces the old")
		require.True(t, again.SetAt.After(set.SetAt))
		_, err = b.st.PolicySet(b.ctx, &queue.PolicySetParams{})
		require.Error(t, err, "an empty document is refused")
	})
}
