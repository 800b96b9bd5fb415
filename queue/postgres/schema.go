package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// migrations are the schema's versions: migrations[i] takes a database
// from version i to version i+1. A new column or table is one more entry;
// an entry, once released, never changes.
var migrations = []string{
	// 1: jobs, their sources, dependencies and attempts; schedules and
	// their decisions; the policy.
	`
CREATE TABLE sources (
	id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	path text NOT NULL,
	text text NOT NULL,
	jobs integer NOT NULL -- jobs and schedules still referring to it; deleted at 0
);
CREATE TABLE jobs (
	rid              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id               text NOT NULL UNIQUE,
	name             text NOT NULL,
	state            text NOT NULL,
	priority         integer NOT NULL,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	finished_at      timestamptz,          -- NULL until final
	not_before       timestamptz,          -- NULL: any time
	deps_pending     integer NOT NULL DEFAULT 0,
	attempts         integer NOT NULL DEFAULT 0,
	max_attempts     integer NOT NULL,
	lease_owner      text NOT NULL DEFAULT '',
	lease_expires    timestamptz,          -- NULL unless running
	cancel_requested boolean NOT NULL DEFAULT false,
	reason           text NOT NULL DEFAULT '',
	spec             jsonb NOT NULL,
	source_id        bigint NOT NULL,
	source_path      text NOT NULL DEFAULT '',
	depends_on       text[] NOT NULL DEFAULT '{}'
);
-- Ready jobs in claim order: a claim reads this index in order and stops
-- at its limit.
CREATE INDEX jobs_ready ON jobs (priority DESC, created_at, rid) WHERE state = 'queued' AND deps_pending = 0;
CREATE INDEX jobs_name ON jobs (name, created_at) WHERE name <> '';
-- Two live jobs never share a name, even when two hosts enqueue at once.
CREATE UNIQUE INDEX jobs_live_name ON jobs (name) WHERE name <> '' AND state IN ('queued', 'running');
CREATE INDEX jobs_lease ON jobs (lease_expires) WHERE state = 'running';
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_blocked ON jobs (deps_pending) WHERE state = 'queued' AND deps_pending > 0;
CREATE INDEX jobs_created ON jobs (created_at DESC, rid DESC);
-- A queue churns: every claim and finish leaves a dead row version and
-- index entries behind. Vacuum and analyze after 2% of the rows changed,
-- not the default 20%.
ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
CREATE TABLE deps (
	dep_rid bigint NOT NULL,
	job_rid bigint NOT NULL,
	PRIMARY KEY (dep_rid, job_rid)
);
CREATE INDEX deps_job ON deps (job_rid);
CREATE TABLE attempts (
	job_rid       bigint NOT NULL,
	number        integer NOT NULL,
	worker_id     text NOT NULL,
	started_at    timestamptz NOT NULL,
	ended_at      timestamptz,
	outcome       text NOT NULL DEFAULT '',
	exit_code     integer,
	signal        text NOT NULL DEFAULT '',
	reason        text NOT NULL DEFAULT '',
	argv          text NOT NULL DEFAULT '',
	trail         text NOT NULL DEFAULT '',
	stdout_path   text NOT NULL DEFAULT '',
	stderr_path   text NOT NULL DEFAULT '',
	policy_sha256 text NOT NULL DEFAULT '',
	PRIMARY KEY (job_rid, number)
);
CREATE TABLE policy (
	id     integer PRIMARY KEY CHECK (id = 1),
	source text NOT NULL,
	path   text NOT NULL,
	sha256 text NOT NULL,
	set_at timestamptz NOT NULL
);
CREATE TABLE schedules (
	name        text PRIMARY KEY,
	spec        jsonb NOT NULL,
	expr        text NOT NULL,
	timezone    text NOT NULL,
	source_id   bigint NOT NULL,
	source_path text NOT NULL DEFAULT '',
	paused      boolean NOT NULL DEFAULT false,
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	next_at     timestamptz NOT NULL,
	deferred_at timestamptz,
	last_tick   timestamptz,
	last_job_id text NOT NULL DEFAULT ''
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE NOT paused;
-- The primary key decides each (schedule, tick) once, across hosts.
CREATE TABLE schedule_decisions (
	schedule  text NOT NULL,
	tick      timestamptz NOT NULL,
	decision  text NOT NULL,
	count     integer NOT NULL DEFAULT 1,
	job_id    text NOT NULL DEFAULT '',
	at        timestamptz NOT NULL,
	worker_id text NOT NULL DEFAULT '',
	detail    text NOT NULL DEFAULT '',
	PRIMARY KEY (schedule, tick)
);
CREATE INDEX schedule_decisions_at ON schedule_decisions (at);
`,
	// 2: attempts' output, readable from every host (queue.LogStore).
	`
CREATE TABLE attempt_logs (
	job_rid bigint NOT NULL,
	number  integer NOT NULL,
	stdout  bytea NOT NULL,
	stderr  bytea NOT NULL,
	PRIMARY KEY (job_rid, number)
);
`,
	// 3: groups (a job's group in a column, their limits and pauses), the
	// queue's pause, and each job's newest start.
	`
ALTER TABLE jobs ADD COLUMN group_name text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN started_at timestamptz; -- the newest attempt's start; NULL when never run
UPDATE jobs SET group_name = spec->>'group' WHERE coalesce(spec->>'group', '') <> '';
UPDATE jobs j SET started_at = (SELECT max(a.started_at) FROM attempts a WHERE a.job_rid = j.rid) WHERE j.attempts > 0;
-- Queued and running jobs of a group: running counts for the claim, and
-- GroupList.
CREATE INDEX jobs_group ON jobs (group_name, state) WHERE group_name <> '' AND state IN ('queued', 'running');
-- Groups with a limit or a pause (queue.Group); other groups have no row.
-- A claim that counts a group's running jobs locks its row first.
CREATE TABLE job_groups (
	name        text PRIMARY KEY,
	max_running integer NOT NULL DEFAULT 0, -- 0 = unlimited
	paused      boolean NOT NULL DEFAULT false
);
-- The queue-wide switches (queue.QueueState); one row once set.
CREATE TABLE queue_state (
	id        integer PRIMARY KEY CHECK (id = 1),
	paused    boolean NOT NULL DEFAULT false,
	paused_at timestamptz
);
`,
	// 4: the claim seeks instead of walking past jobs it cannot take yet:
	// jobs not yet due (scheduled) and jobs of groups with a limit or a
	// pause (gated) leave jobs_ready for indexes of their own.
	`
-- true from when not_before is set until a claim finds it due.
ALTER TABLE jobs ADD COLUMN scheduled boolean NOT NULL DEFAULT false;
-- true while the job's group has a row in job_groups, kept on queued and
-- running jobs by the writes of job_groups.
ALTER TABLE jobs ADD COLUMN gated boolean NOT NULL DEFAULT false;
UPDATE jobs SET scheduled = true WHERE state = 'queued' AND not_before IS NOT NULL;
UPDATE jobs SET gated = true WHERE group_name <> '' AND state IN ('queued', 'running') AND group_name IN (SELECT name FROM job_groups);
DROP INDEX jobs_ready;
-- Claimable jobs outside limited and paused groups, in claim order.
CREATE INDEX jobs_ready ON jobs (priority DESC, created_at, rid) WHERE state = 'queued' AND deps_pending = 0 AND NOT scheduled AND NOT gated;
-- Claimable jobs of limited and paused groups, in claim order within each
-- group: a claim seeks the first ones of each group with slots left.
CREATE INDEX jobs_gated ON jobs (group_name, priority DESC, created_at, rid) WHERE state = 'queued' AND deps_pending = 0 AND NOT scheduled AND gated;
-- Jobs not yet due, by due time: a claim clears scheduled on those due.
CREATE INDEX jobs_scheduled ON jobs (not_before) WHERE state = 'queued' AND deps_pending = 0 AND scheduled;
`,
}

// SchemaVersion is the schema version this paddock writes.
var SchemaVersion = len(migrations)

// ErrSchemaNewer: the database's schema was written by a newer paddock;
// this one refuses to use it (it would not know the newer columns'
// rules).
var ErrSchemaNewer = errors.New("postgres: the database's schema is newer than this paddock")

// migrateLock is the advisory lock key under which the schema is checked
// and migrated, so that workers starting together migrate once.
const migrateLock = 0x706164646f636b // "paddock"

// Migrate brings the schema to SchemaVersion and returns the version it
// found (0 for an empty database). ErrSchemaNewer when the database is
// newer. Safe to run from many hosts at once: one migrates, the others
// wait for it under an advisory lock and find nothing to do.
func (s *Store) Migrate(ctx context.Context) (from int, err error) {
	err = s.tx(ctx, func(tx pgx.Tx, _ time.Time) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS paddock_schema (version integer NOT NULL)`); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		v, found := 0, true
		err := tx.QueryRow(ctx, `SELECT version FROM paddock_schema`).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
		} else if err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		from = v
		if v > SchemaVersion {
			return fmt.Errorf("%w: schema version %d, this paddock knows up to %d: upgrade paddock", ErrSchemaNewer, v, SchemaVersion)
		}
		for i := v; i < SchemaVersion; i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("postgres: migrate to version %d: %w", i+1, err)
			}
		}
		if !found {
			_, err = tx.Exec(ctx, `INSERT INTO paddock_schema (version) VALUES ($1)`, SchemaVersion)
		} else if v < SchemaVersion {
			_, err = tx.Exec(ctx, `UPDATE paddock_schema SET version = $1`, SchemaVersion)
		}
		if err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		return nil
	})
	return from, err
}
