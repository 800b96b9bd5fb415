package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"paddock/queue"
)

// PolicyGet implements Store.
func (s *Store) PolicyGet(ctx context.Context) (queue.Policy, error) {
	if s.closed.Load() {
		return queue.Policy{}, queue.ErrClosed
	}
	var (
		p     queue.Policy
		setNS int64
	)
	err := s.r.QueryRowContext(ctx, `SELECT source, path, sha256, set_ns FROM policy WHERE id = 1`).Scan(&p.Source, &p.Path, &p.SHA256, &setNS)
	if errors.Is(err, sql.ErrNoRows) {
		return queue.Policy{}, queue.ErrPolicyNotSet
	}
	if err != nil {
		return queue.Policy{}, fmt.Errorf("sqlite: policy: %w", err)
	}
	p.SetAt = ts(setNS)
	return p, nil
}

// PolicySet implements Store.
func (s *Store) PolicySet(ctx context.Context, p *queue.PolicySetParams) (queue.Policy, error) {
	if p == nil || p.Source == "" {
		return queue.Policy{}, errors.New("sqlite: policy: empty document")
	}
	sum := sha256.Sum256([]byte(p.Source))
	out := queue.Policy{Source: p.Source, Path: p.Path, SHA256: hex.EncodeToString(sum[:])}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		out.SetAt = ts(now)
		_, err := tx.ExecContext(ctx, `INSERT INTO policy (id, source, path, sha256, set_ns) VALUES (1, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET source = excluded.source, path = excluded.path, sha256 = excluded.sha256, set_ns = excluded.set_ns`,
			out.Source, out.Path, out.SHA256, now)
		if err != nil {
			return fmt.Errorf("sqlite: policy: %w", err)
		}
		return nil
	})
	if err != nil {
		return queue.Policy{}, err
	}
	return out, nil
}
