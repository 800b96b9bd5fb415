package postgres

import (
	"sync"
	"sync/atomic"
	"time"

	"paddock/queue"
)

var _ queue.OutageReporter = (*Store)(nil)

// outages is a store's outage state and its watchers (queue.OutageReporter).
// An outage starts at the first try that found the server unreachable and
// is retried, and ends at the next call that succeeds.
type outages struct {
	down     atomic.Bool // read on every successful call, without the lock
	mu       sync.Mutex
	since    time.Time
	retries  int
	watchers map[int]func(queue.OutageEvent)
	nextID   int
}

// WatchOutages implements queue.OutageReporter.
func (s *Store) WatchOutages(fn func(queue.OutageEvent)) (stop func()) {
	o := &s.outages
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.watchers == nil {
		o.watchers = map[int]func(queue.OutageEvent){}
	}
	id := o.nextID
	o.nextID++
	o.watchers[id] = fn
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.watchers, id)
	}
}

// outageRetry records a try that found the server unreachable and will
// be retried.
func (s *Store) outageRetry(err error) {
	o := &s.outages
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		o.down.Store(true)
		o.since, o.retries = time.Now(), 0
		o.send(queue.OutageEvent{Kind: queue.OutageStarted, Since: o.since, Err: err, RetryFor: s.retryFor})
	}
	o.retries++
	o.send(queue.OutageEvent{Kind: queue.OutageRetry, Since: o.since, Err: err, RetryFor: s.retryFor, Retries: o.retries})
}

// outageOver records a call that succeeded: it ends an outage, if one
// was going on.
func (s *Store) outageOver() {
	o := &s.outages
	if !o.down.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		return
	}
	o.down.Store(false)
	o.send(queue.OutageEvent{Kind: queue.OutageEnded, Since: o.since, RetryFor: s.retryFor, Retries: o.retries})
}

// send calls every watcher; o.mu is held, so that events keep their order.
func (o *outages) send(ev queue.OutageEvent) {
	for _, fn := range o.watchers {
		fn(ev)
	}
}
