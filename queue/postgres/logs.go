package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"paddock/queue"
)

var _ queue.LogStore = (*Store)(nil)

// AttemptLogPut implements queue.LogStore: one guarded INSERT ... ON
// CONFLICT, writing only while the attempt runs under p.WorkerID's lease.
func (s *Store) AttemptLogPut(ctx context.Context, p *queue.AttemptLogPutParams) error {
	if p == nil || p.WorkerID == "" {
		return errors.New("postgres: attempt log: WorkerID is required")
	}
	stdout, stderr := p.Log.Stdout, p.Log.Stderr
	if stdout == nil {
		stdout = []byte{}
	}
	if stderr == nil {
		stderr = []byte{}
	}
	return s.txClock(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO attempt_logs (job_rid, number, stdout, stderr)
			SELECT rid, $2, $3, $4 FROM jobs WHERE id = $1 AND state = 'running' AND lease_owner = $5 AND attempts = $2
			ON CONFLICT (job_rid, number) DO UPDATE SET stdout = excluded.stdout, stderr = excluded.stderr`,
			p.JobID, p.Number, stdout, stderr, p.WorkerID)
		if err != nil {
			return fmt.Errorf("postgres: attempt log: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: job %s attempt %d is not running under worker %q's lease", queue.ErrLeaseLost, p.JobID, p.Number, p.WorkerID)
		}
		return nil
	})
}

// AttemptLogGet implements queue.LogStore.
func (s *Store) AttemptLogGet(ctx context.Context, jobID string, number int) (queue.AttemptLog, error) {
	var l queue.AttemptLog
	err := s.read(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT l.stdout, l.stderr FROM attempt_logs l JOIN jobs j ON j.rid = l.job_rid WHERE j.id = $1 AND l.number = $2`, jobID, number).Scan(&l.Stdout, &l.Stderr)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no stored output for job %s attempt %d", queue.ErrNotFound, jobID, number)
		}
		if err != nil {
			return fmt.Errorf("postgres: attempt log: %w", err)
		}
		return nil
	})
	return l, err
}
