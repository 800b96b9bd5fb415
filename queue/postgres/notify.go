package postgres

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"paddock/queue"
)

// Wake-ups between hosts: every transaction that makes jobs ready to
// claim (an enqueue, a finish that releases a dependent, a recovery or
// release of leases, a retry, a schedule's instances) is followed, once it
// has committed, by one NOTIFY on notifyChannel, whatever the number of
// jobs. A committing NOTIFY holds a cluster-wide lock until its commit
// record is flushed (async.c, PreCommit_Notify), so notifying commits
// cannot share a flush: sent inside the job's own transaction, single-job
// enqueues stalled at one per WAL flush (~550 a second, measured). So the
// NOTIFY is its own transaction, sent after the job's has committed, with
// synchronous_commit off: it waits for no flush (a notification is a hint,
// and one lost in a server crash only leaves the wake-up to the poll),
// and the job's own commit stays durable. A plain finish sends none and
// waits poll for final states. Listeners hold one dedicated connection each (LISTEN needs
// a session: it does not work through a transaction-pooling PgBouncer),
// reconnect with backoff, and are only a hint: workers and waits poll
// too. With PollOnlyParam=1 in the URL, the store neither notifies nor
// listens.

// notifyChannel is the channel of the queue's notifications.
const notifyChannel = "paddock_queue"

// PollOnlyParam is the URL query parameter that turns notifications off
// ("paddock_poll_only=1"), for servers reached through a PgBouncer in
// transaction mode. It is paddock's and never sent to the server.
const PollOnlyParam = "paddock_poll_only"

var _ queue.Notifier = (*Store)(nil)

// splitPollOnly removes PollOnlyParam from a postgres:// URL and says
// whether it was set to 1 or true; other strings are returned as given.
func splitPollOnly(raw string) (string, bool, error) {
	if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
		return raw, false, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw, false, nil // pgx says what is wrong
	}
	q := u.Query()
	if !q.Has(PollOnlyParam) {
		return raw, false, nil
	}
	v := q.Get(PollOnlyParam)
	q.Del(PollOnlyParam)
	u.RawQuery = q.Encode()
	switch v {
	case "1", "true":
		return u.String(), true, nil
	case "0", "false":
		return u.String(), false, nil
	}
	return raw, false, fmt.Errorf("postgres: %s=%q: expected 1 or 0", PollOnlyParam, v)
}

// notifyingTx is the transaction [Store.txOnce] hands its function: notify
// marks it, and txOnce sends the notification once it has committed.
type notifyingTx struct {
	pgx.Tx
	notify bool
}

// notify asks for a notification once tx (a transaction of [Store.tx])
// has committed. It never fails; the error is for its callers' return.
func (s *Store) notify(_ context.Context, tx pgx.Tx) error {
	if n, ok := tx.(*notifyingTx); ok {
		n.notify = true
	}
	return nil
}

// notifyTimeout bounds the NOTIFY sent after a commit: the caller's
// change is durable already, and a wake-up late by more is left to the
// poll.
const notifyTimeout = 2 * time.Second

// sendNotify sends one NOTIFY in a transaction of its own whose commit
// waits for no flush. Failures are ignored: listeners poll too.
func (s *Store) sendNotify(ctx context.Context) {
	if s.pollOnly {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SET LOCAL synchronous_commit TO off`)
	b.Queue(`SELECT pg_notify('` + notifyChannel + `', '')`)
	b.Queue(`COMMIT`)
	_ = conn.SendBatch(ctx, b).Close()
}

// Notifications implements queue.Notifier with a dedicated listening
// connection. A poll-only store returns a channel that never receives.
func (s *Store) Notifications() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	if s.pollOnly {
		return c, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.listen(ctx, c)
	}()
	return c, func() { cancel(); <-done }
}

// listen keeps a LISTEN connection until ctx ends, reconnecting with
// backoff (up to 5 s); after a reconnection it pokes c once, since
// notifications sent meanwhile were lost.
func (s *Store) listen(ctx context.Context, c chan<- struct{}) {
	poke := func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	backoff := 100 * time.Millisecond
	for first := true; ctx.Err() == nil; first = false {
		conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+notifyChannel)
			if err == nil {
				backoff = 100 * time.Millisecond
				if !first {
					poke()
				}
				for err == nil {
					_, err = conn.WaitForNotification(ctx)
					if err == nil {
						poke()
					}
				}
			}
			conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
