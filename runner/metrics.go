package runner

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"paddock/queue"
)

// Metrics are a worker's Prometheus metrics
// (github.com/prometheus/client_golang), served by `paddock worker
// --metrics-addr`. A nil *Metrics records nothing, so the worker and the
// executor call its methods unconditionally. Safe for concurrent use.
//
//   - paddock_jobs_claimed_total: jobs this worker claimed.
//   - paddock_attempts_finished_total{outcome}: attempts this worker
//     ended, by queue outcome (succeeded, failed, denied, ...).
//   - paddock_queue_jobs{state}: jobs in the queue by state, read from the
//     store at each scrape (one count query, 2 s at most); missing from
//     a scrape when the store did not answer in time.
//   - paddock_claim_duration_seconds: one JobClaim call, found or not.
//   - paddock_hook_decision_duration_seconds: one hook chain decision.
//   - paddock_lease_recoveries_total: expired leases this worker took
//     back from dead workers.
//   - paddock_store_errors_total{op}: store calls that failed, by
//     operation (claim, recover, record, heartbeat, release), and
//     op="retried": tries of any call that found the store's server
//     unreachable and were retried (queue.OutageReporter).
type Metrics struct {
	claimed    prometheus.Counter
	finished   *prometheus.CounterVec
	claimDur   prometheus.Histogram
	hookDur    prometheus.Histogram
	recoveries prometheus.Counter
	storeErrs  *prometheus.CounterVec
}

// NewMetrics makes a worker's metrics and registers them, and a collector
// of the queue's depth by state read from store, with reg. The error is
// reg's (a name registered twice).
func NewMetrics(reg prometheus.Registerer, store queue.Store) (*Metrics, error) {
	// Latencies from 100 µs (a claim on a local database) to 10 s.
	buckets := prometheus.ExponentialBuckets(0.0001, 2.5, 12)
	m := &Metrics{
		claimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "paddock_jobs_claimed_total", Help: "Jobs this worker claimed."}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paddock_attempts_finished_total",
			Help: "Attempts this worker ended, by outcome."}, []string{"outcome"}),
		claimDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paddock_claim_duration_seconds",
			Help: "Time of one claim call to the store, whether it found jobs or not.", Buckets: buckets}),
		hookDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paddock_hook_decision_duration_seconds",
			Help: "Time of one hook chain decision.", Buckets: buckets}),
		recoveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "paddock_lease_recoveries_total",
			Help: "Expired leases of dead workers this worker took back."}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paddock_store_errors_total",
			Help: "Store calls that failed, by operation; op=\"retried\": tries that found the store's server unreachable and were retried."}, []string{"op"}),
	}
	for _, o := range queue.Outcomes() {
		m.finished.WithLabelValues(o)
	}
	for _, op := range []string{"claim", "recover", "record", "heartbeat", "release", "retried"} {
		m.storeErrs.WithLabelValues(op)
	}
	for _, c := range []prometheus.Collector{m.claimed, m.finished, m.claimDur, m.hookDur, m.recoveries, m.storeErrs, depthCollector{store}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) claim(d time.Duration, n int, err error) {
	if m == nil {
		return
	}
	m.claimDur.Observe(d.Seconds())
	m.claimed.Add(float64(n))
	if err != nil {
		m.storeErrs.WithLabelValues("claim").Inc()
	}
}

func (m *Metrics) hookDecision(d time.Duration) {
	if m != nil {
		m.hookDur.Observe(d.Seconds())
	}
}

func (m *Metrics) finishedAttempt(outcome string) {
	if m != nil && outcome != "" {
		m.finished.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) recovered(n int) {
	if m != nil {
		m.recoveries.Add(float64(n))
	}
}

func (m *Metrics) storeError(op string) {
	if m != nil {
		m.storeErrs.WithLabelValues(op).Inc()
	}
}

// depthCollector reports the queue's jobs by state at each scrape.
type depthCollector struct{ store queue.Store }

var depthDesc = prometheus.NewDesc("paddock_queue_jobs", "Jobs in the queue, by state (read from the store at each scrape).", []string{"state"}, nil)

func (c depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- depthDesc }

func (c depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.store.JobCounts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, err)
		return
	}
	for _, st := range queue.JobStates() {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}
