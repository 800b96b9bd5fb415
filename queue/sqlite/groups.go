package sqlite

import (
	"context"

	"paddock/queue"
)

// GroupLimitSet implements Store.
func (s *Store) GroupLimitSet(ctx context.Context, p *queue.GroupLimitSetParams) (queue.Group, error) {
	return queue.Group{}, queue.ErrNotImplemented
}

// GroupList implements Store.
func (s *Store) GroupList(ctx context.Context, p *queue.GroupListParams) ([]queue.Group, error) {
	return nil, queue.ErrNotImplemented
}

// QueueGet implements Store.
func (s *Store) QueueGet(ctx context.Context) (queue.QueueState, error) {
	return queue.QueueState{}, queue.ErrNotImplemented
}

// QueuePause implements Store.
func (s *Store) QueuePause(ctx context.Context, p *queue.QueuePauseParams) error {
	return queue.ErrNotImplemented
}

// QueueResume implements Store.
func (s *Store) QueueResume(ctx context.Context, p *queue.QueuePauseParams) error {
	return queue.ErrNotImplemented
}

// ScheduleRun implements Store.
func (s *Store) ScheduleRun(ctx context.Context, p *queue.ScheduleRunParams) (queue.ScheduleRunResult, error) {
	return queue.ScheduleRunResult{}, queue.ErrNotImplemented
}

// JobSourceGet implements Store.
func (s *Store) JobSourceGet(ctx context.Context, id string) (string, error) {
	return "", queue.ErrNotImplemented
}
