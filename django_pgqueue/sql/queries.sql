-- Every statement django-pgqueue runs against pgqueue_job, one block per name.
-- Loaded once by django_pgqueue.sql; only django_pgqueue.queue runs them, through
-- django_pgqueue.sql.runner. Parameters use psycopg's the name style, so a
-- literal percent sign is written %%.
--
-- An error-history entry is built by pgqueue_error_entry() and appended by
-- pgqueue_push_error(), which keeps the newest entries only; last_error is
-- pgqueue_error_line(). The three functions are created by migration 0006.

-- name: enqueue
-- One job, one round trip. The NOTIFY is part of the statement, so it travels
-- with the caller's transaction and is delivered only if that transaction
-- commits. "notified" is a throw-away column: it exists so that pg_notify() is
-- evaluated at all (removing it as unused would remove the NOTIFY). created_at is
-- the transaction's now(), as is the run_at of a job given none: run_at =
-- created_at is how a row says "run at once", so any other run_at is the
-- run_after it was enqueued with (or a later run's time). now(), not the
-- statement's time: a claim in the same transaction (run_jobs() in a TestCase)
-- must find the job ready. A live job holding the unique_key makes it insert
-- nothing and return no row.
WITH inserted AS (
-- include: _enqueue_row
    ON CONFLICT (unique_key) WHERE status IN ('queued', 'running') AND unique_key IS NOT NULL
    DO NOTHING
-- include: _enqueue_returning
;

-- name: enqueue_keyless
-- enqueue, for a job without a unique_key, which no row can conflict with: no ON
-- CONFLICT, whose speculative insertion cost some 8% of a one-job transaction's
-- time on a durable server (measured against the same INSERT without it).
WITH inserted AS (
-- include: _enqueue_row
-- include: _enqueue_returning
;

-- name: _enqueue_row
    INSERT INTO pgqueue_job (
        task, args, kwargs, queue, priority, status, attempts, max_attempts, run_at,
        created_at, last_error, errors, worker_ids, unique_key, concurrency_key, backoff,
        retry_policy
    )
    VALUES (
        %(task)s::text, %(args)s::jsonb, %(kwargs)s::jsonb, %(queue)s::text, %(priority)s::int, 'queued', 0,
        %(max_attempts)s::int, COALESCE(%(run_at)s::timestamptz, now()), now(),
        '', '[]', '[]', %(unique_key)s::text, %(concurrency_key)s::text, %(backoff)s::float8,
        %(retry_policy)s::jsonb
    )
;

-- name: _enqueue_returning
    RETURNING id, created_at, run_at, queue
)
SELECT i.id, i.created_at, i.run_at,
       (SELECT pg_notify(%(channel)s::text, i.queue) WHERE %(notify)s::bool) IS NULL AS notified
FROM inserted AS i;

-- name: enqueue_many
-- N jobs in one statement: the columns arrive as arrays and are unnested in order.
-- "woken" is read only so that its pg_notify() calls are evaluated. created_at and
-- a missing run_at are now(), as in enqueue.
WITH inserted AS (
    INSERT INTO pgqueue_job (
        task, args, kwargs, queue, priority, status, attempts, max_attempts, run_at,
        created_at, last_error, errors, worker_ids, unique_key, concurrency_key, backoff,
        retry_policy
    )
    SELECT t, a::jsonb, k::jsonb, q, p, 'queued', 0, m, COALESCE(r, now()), now(), '', '[]',
           '[]', u, c, b, rp::jsonb
    FROM unnest(
        %(tasks)s::text[], %(args)s::text[], %(kwargs)s::text[], %(queues)s::text[],
        %(priorities)s::int[], %(max_attempts)s::int[], %(run_ats)s::timestamptz[],
        %(unique_keys)s::text[], %(concurrency_keys)s::text[], %(backoffs)s::float8[],
        %(retry_policies)s::text[]
    ) WITH ORDINALITY AS x (t, a, k, q, p, m, r, u, c, b, rp, n)
    ORDER BY n
    ON CONFLICT (unique_key) WHERE status IN ('queued', 'running') AND unique_key IS NOT NULL
    DO NOTHING
    RETURNING id, queue
),
woken AS (
    SELECT count(pg_notify(%(channel)s::text, queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS q
    WHERE %(notify)s::bool
)
-- "now" is the rows' created_at.
SELECT COALESCE((SELECT array_agg(id ORDER BY id) FROM inserted), '{}') AS ids,
       now() AS now, (SELECT n FROM woken) AS woken;

-- name: reserve_ids
-- Ids for a COPY of many jobs, and one moment for their created_at and (when
-- they have none) their run_at: now(), as enqueue gives them.
SELECT array_agg(nextval(pg_get_serial_sequence('pgqueue_job', 'id'))) AS ids,
       now() AS now
FROM generate_series(1, %(count)s::int);

-- name: copy_jobs
-- Many jobs at COPY speed (no ON CONFLICT: used only when no job has a unique_key).
COPY pgqueue_job (
    id, task, args, kwargs, queue, priority, status, attempts, max_attempts, run_at,
    created_at, last_error, errors, worker_ids, concurrency_key, backoff, retry_policy
) FROM STDIN;

-- name: notify_queues
-- Wake workers of these queues when the transaction commits.
SELECT count(pg_notify(%(channel)s::text, queue)) AS woken
FROM unnest(%(queues)s::text[]) AS queue
WHERE %(notify)s::bool;

-- name: live_job_by_unique_key
SELECT id, created_at, run_at, status
FROM pgqueue_job
WHERE unique_key = %(unique_key)s::text AND status IN ('queued', 'running');

-- name: claim
-- One statement: choose, lock and lease up to the limit ready jobs, of any queue.
-- * The limit (and claim_queues' queues) are written into the text by
--   django_pgqueue.sql.variant(), not bound: bound, they are costed as a tenth
--   of the table (and ten queues), so against a big backlog the prepared
--   statement's generic plan looked expensive enough to be replanned on every
--   call, or JIT-compiled (some 15 ms a claim). The worker claims in powers of
--   two, so a connection prepares a dozen variants at most.
-- * The chosen ids are MATERIALIZED so the LIMIT subquery runs exactly once; an
--   inlined "id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)" may be re-run by
--   the planner and lock (and claim) more rows than asked.
-- * SKIP LOCKED keeps claimers off each other's rows; a row another claim changed
--   after our snapshot is re-checked under its lock and dropped if no longer queued.
-- * A paused queue (a row of pgqueue_queue with paused_at set) is skipped, by
--   every worker at once: its jobs stay queued until it is resumed. (RECURSIVE:
--   for queued_queues, the list of queues read while one is paused.)
-- * concurrency_key: skip keys already running and keep one job per key in the
--   batch. Two claims racing for the same key are settled by the unique index
--   pgqueue_job_one_running_per_key (the loser gets a unique violation and retries).
-- * lease_token is this claim's token, chosen by the worker and never used by it
--   before: every later write of the run is fenced on it. (A count kept by the
--   row could repeat once a crash rolled back an unflushed claim; the worker's
--   own token cannot.) attempts is capped at max_attempts (a row written by hand
--   with no attempt left gets a last one), so no row can make this statement
--   fail for the others.
WITH RECURSIVE
-- include: _relax_commit
,
-- include: _claim_candidates_all
-- include: _claim_lease

-- name: claim_queues
-- The claim of a worker serving chosen queues: the same statement, but each
-- queue's jobs are read from its own range of pgqueue_job_ready_by_queue (at
-- most the limit each, locked as they are read) and merged in the claim's order.
-- A queue's claim then costs the same whatever the other queues hold; filtering
-- the ready index by queue instead would walk past every other queue's backlog.
WITH
-- include: _relax_commit
,
-- include: _claim_candidates_by_queue
-- include: _claim_lease

-- name: _claim_candidates_all
-- While no queue is paused (the usual case) the first branch walks the ready
-- index in the claim's order. While one is, walking it would pass every ready job
-- of the paused queue that sorts first (a paused backlog of 200,000 jobs made
-- each claim 200 times slower), so the second branch runs instead: it finds the
-- queues that have queued jobs (queued_queues: one descent of the by-queue index
-- per queue) and reads each one that is not paused from its own range, as
-- claim_queues does. Each branch's EXISTS on pgqueue_queue is a one-time filter:
-- the branch that does not apply is never executed.
queued_queues (name) AS (
    (SELECT j.queue FROM pgqueue_job AS j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgqueue_job AS j
            WHERE j.status = 'queued' AND j.queue > q.name
            ORDER BY j.queue LIMIT 1)
    FROM queued_queues AS q
    WHERE q.name IS NOT NULL
),
candidates AS MATERIALIZED (
    SELECT * FROM (
        SELECT j.id, j.concurrency_key, j.priority, j.run_at
        FROM pgqueue_job AS j
        WHERE j.status = 'queued'
          AND j.run_at <= now()
          AND (j.concurrency_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM pgqueue_job AS r
                WHERE r.status = 'running' AND r.concurrency_key = j.concurrency_key))
          AND NOT EXISTS (SELECT 1 FROM pgqueue_queue AS p WHERE p.paused_at IS NOT NULL)
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT %(limit)s::int
        FOR UPDATE OF j SKIP LOCKED
    ) AS in_order
    UNION ALL
    SELECT * FROM (
        SELECT c.id, c.concurrency_key, c.priority, c.run_at
        FROM queued_queues AS q
-- include: _claim_queue_ranges
    ) AS by_queue
    WHERE EXISTS (SELECT 1 FROM pgqueue_queue AS p WHERE p.paused_at IS NOT NULL)
),

-- name: _claim_candidates_by_queue
candidates AS MATERIALIZED (
    SELECT c.id, c.concurrency_key, c.priority, c.run_at
    FROM unnest(%(queues)s::text[]) AS q (name)
-- include: _claim_queue_ranges
),

-- name: _claim_queue_ranges
    CROSS JOIN LATERAL (
        SELECT j.id, j.concurrency_key, j.priority, j.run_at
        FROM pgqueue_job AS j
        WHERE j.status = 'queued'
          AND j.queue = q.name
          AND j.run_at <= now()
          AND (j.concurrency_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM pgqueue_job AS r
                WHERE r.status = 'running' AND r.concurrency_key = j.concurrency_key))
        -- j.queue is constant here: ordering by it costs nothing, and makes this
        -- order the by-queue index's exactly.
        ORDER BY j.queue, j.priority DESC, j.run_at, j.id
        LIMIT %(limit)s::int
        FOR UPDATE OF j SKIP LOCKED
    ) AS c
    -- A paused queue's range is not even read.
    WHERE q.name IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM pgqueue_queue AS p WHERE p.name = q.name AND p.paused_at IS NOT NULL)
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(limit)s::int

-- name: _claim_lease
chosen AS MATERIALIZED (
    SELECT id FROM (
        SELECT id, concurrency_key,
               row_number() OVER (PARTITION BY concurrency_key
                                  ORDER BY priority DESC, run_at, id) AS nth
        FROM candidates
    ) AS ranked
    WHERE concurrency_key IS NULL OR nth = 1
)
UPDATE pgqueue_job AS j
SET status = 'running',
    attempts = least(j.attempts + 1, j.max_attempts),
    lease_token = %(token)s::bigint,
    locked_until = now() + make_interval(secs => %(lease)s::float8),
    locked_by = %(worker)s::text,
    started_at = COALESCE(j.started_at, now()),
    attempted_at = now(),
    -- The newest 100 claimers only: a job retried for ever must not grow without bound.
    worker_ids = (CASE WHEN jsonb_array_length(j.worker_ids) < 100 THEN j.worker_ids
                       ELSE j.worker_ids - 0 END) || to_jsonb(%(worker)s::text)
FROM chosen, relax
WHERE j.id = chosen.id
-- What running the job needs, and what a Tasks-framework result reports (so the
-- worker never reads the row again). Timestamps come as epoch seconds (float8:
-- a timestamptz would be parsed into a datetime for every job, a quarter of a
-- busy worker's CPU); the JSON columns come as text, decoded row by row, so that
-- one undecodable row is buried on its own instead of failing its whole batch,
-- and the error history only when there is one.
RETURNING j.id, j.lease_token AS run, j.task, j.args::text AS args, j.kwargs::text AS kwargs,
          j.queue, j.priority, j.attempts AS attempt, j.max_attempts, j.concurrency_key,
          j.unique_key, j.backoff, j.snoozes,
          extract(epoch FROM j.created_at)::float8 AS enqueued_at,
          extract(epoch FROM j.run_at)::float8 AS run_at,
          extract(epoch FROM j.started_at)::float8 AS started_at,
          extract(epoch FROM j.attempted_at)::float8 AS attempted_at,
          CASE WHEN j.errors = '[]'::jsonb THEN NULL ELSE j.errors::text END AS errors,
          j.worker_ids::text AS worker_ids, j.retry_policy::text AS retry_policy;

-- name: complete
-- Record finished runs in one statement. The fence (still running, the same run,
-- the same worker) stops a run whose lease expired from overwriting a newer run.
-- Returns each run written (busy false) and each run still held whose row another
-- transaction holds locked (busy true): skipped, to be written later (_free_runs).
WITH
-- include: _relax_commit
,
-- include: _free_runs
, written AS (
UPDATE pgqueue_job AS j
SET status = 'done', done_at = now(), locked_until = NULL, result = o.result::jsonb
FROM (SELECT u.* FROM unnest(%(ids)s::bigint[], %(runs)s::bigint[], %(results)s::text[])
                      AS u (id, run, result)
      WHERE u.id IN (SELECT id FROM free) OFFSET 0) AS o, relax
-- include: _still_held
RETURNING j.id
)
SELECT id, false AS busy FROM written
UNION ALL
SELECT o.id, true
-- include: _locked_out
;

-- name: fail
-- Record the runs that did not succeed, each by what the worker asked for:
-- * a failure: back to queued after the given delay, or dead when the attempts
--   are spent or the failure is final;
-- * a snooze (raise Snooze): back to queued after the delay, the attempt not
--   spent (as a release), no failure recorded, the snooze counted;
-- * a cancellation (f.cancel: the task raised Cancel, or stopped because it was
--   asked to): cancelled, with the reason as the message.
-- A job an operator asked to stop is never retried nor snoozed: whatever its run
-- ended with, it ends cancelled with the operator's reason, and what the run did
-- is kept as the entry's traceback. Fenced like complete; a run whose row another
-- transaction holds locked is returned busy (status NULL), not waited for.
WITH
-- include: _relax_commit
,
-- include: _free_runs
, written AS (
UPDATE pgqueue_job AS j
SET status = CASE WHEN o.cancel OR j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                  WHEN o.snooze THEN 'queued'
                  WHEN o.final OR j.attempts >= j.max_attempts THEN 'dead'
                  ELSE 'queued' END,
    run_at = CASE WHEN o.cancel OR j.cancel_requested_at IS NOT NULL
                       OR (NOT o.snooze AND (o.final OR j.attempts >= j.max_attempts))
                  THEN j.run_at
                  ELSE now() + make_interval(secs => o.delay) END,
    done_at = CASE WHEN o.cancel OR j.cancel_requested_at IS NOT NULL
                        OR (NOT o.snooze AND (o.final OR j.attempts >= j.max_attempts))
                   THEN now() END,
    locked_until = NULL,
    attempts = CASE WHEN o.snooze AND NOT o.cancel AND j.cancel_requested_at IS NULL
                    THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
    snoozes = CASE WHEN o.snooze THEN least(j.snoozes + 1, 1000000000) ELSE j.snoozes END,
    last_error = CASE WHEN j.cancel_requested_at IS NOT NULL
                      THEN pgqueue_error_line('Cancelled', j.cancel_reason)
                      WHEN o.cancel THEN pgqueue_error_line(o.exception, o.message)
                      WHEN o.snooze THEN j.last_error
                      ELSE pgqueue_error_line(o.exception, o.message) END,
    errors = CASE
        WHEN j.cancel_requested_at IS NOT NULL
        THEN pgqueue_push_error(j.errors, pgqueue_error_entry(
            j.attempts, 'Cancelled', j.cancel_reason,
            CASE WHEN o.traceback <> '' THEN o.traceback
                 -- the run's own Cancel carried the operator's reason: nothing to add
                 WHEN o.cancel AND o.message = j.cancel_reason THEN ''
                 ELSE pgqueue_error_line(o.exception, o.message) END))
        WHEN o.cancel
        THEN pgqueue_push_error(j.errors, pgqueue_error_entry(j.attempts, o.exception,
                                                              o.message, o.traceback))
        WHEN o.snooze THEN j.errors
        ELSE pgqueue_push_error(j.errors, pgqueue_error_entry(j.attempts, o.exception,
                                                              o.message, o.traceback)) END,
    error_count = CASE WHEN o.snooze AND NOT o.cancel AND j.cancel_requested_at IS NULL
                       THEN j.error_count ELSE least(j.error_count + 1, 1000000000) END
FROM (SELECT u.* FROM unnest(%(ids)s::bigint[], %(runs)s::bigint[], %(delays)s::float8[],
                             %(exceptions)s::text[], %(messages)s::text[], %(tracebacks)s::text[],
                             %(finals)s::bool[], %(cancels)s::bool[], %(snoozes)s::bool[])
           AS u (id, run, delay, exception, message, traceback, final, cancel, snooze)
      WHERE u.id IN (SELECT id FROM free) OFFSET 0) AS o, relax
-- include: _still_held
RETURNING j.id, j.status
)
SELECT id, status, false AS busy FROM written
UNION ALL
SELECT o.id, NULL, true
-- include: _locked_out
;

-- name: heartbeat
-- Extend the leases this worker still holds on these runs; returns the runs still
-- held, each saying whether an operator asked it to stop (and why), and whether
-- its queue is paused (a job claimed ahead and not started yet then goes back).
-- A row another transaction holds locked (an operator's cancel() inside a long
-- atomic block, an edit in the admin) is skipped, not waited for: waiting stalled
-- the renewal of every other lease of the worker until that transaction ended,
-- and those leases lapsed while their jobs ran. A skipped run this worker still
-- holds comes back with kept false (busy): neither renewed nor lost, it is tried
-- again at the next beat. A run lost because its job ended cancelled meanwhile (an
-- operator asked it to stop, and a reaper then found its lease expired: the worker
-- was stopped, or its heartbeat late) comes back with kept false and the request:
-- lost, but the task, which may still be running here, is told to stop after all.
-- So does one whose job a reaper gave back and an operator then cancelled while it
-- was queued: no claim came after this run (its token is still the row's).
-- Only the runs the renewal missed are looked up for it (none, on most beats).
WITH
-- include: _relax_commit
,
-- include: _free_runs
, renewed AS (
UPDATE pgqueue_job AS j
SET locked_until = now() + make_interval(secs => %(lease)s::float8)
FROM (SELECT u.* FROM unnest(%(ids)s::bigint[], %(runs)s::bigint[]) AS u (id, run)
      WHERE u.id IN (SELECT id FROM free) OFFSET 0) AS o, relax
-- include: _still_held
RETURNING j.id, j.lease_token AS run, true AS kept,
          j.cancel_requested_at IS NOT NULL AS cancel_requested, j.cancel_reason,
          EXISTS (SELECT FROM pgqueue_queue AS q
                  WHERE q.name = j.queue AND q.paused_at IS NOT NULL) AS paused
)
SELECT * FROM renewed
UNION ALL
SELECT o.id, o.run, false, false, NULL::text, false
-- include: _locked_out
UNION ALL
SELECT o.id, o.run, false, true, j.cancel_reason, false
FROM (SELECT u.* FROM unnest(%(ids)s::bigint[], %(runs)s::bigint[]) AS u (id, run)
      WHERE u.id IN (SELECT id FROM free) AND u.id NOT IN (SELECT id FROM renewed)
      OFFSET 0) AS o, pgqueue_job AS j
WHERE j.id = o.id AND j.lease_token = o.run AND j.status || '' = 'cancelled'
;

-- name: release
-- Give runs back without spending their attempt (a stopping worker; prefetched
-- runs that never started). A job an operator asked to stop is not given back:
-- it ends cancelled. A NULL reason (runs that never started) adds no entry to
-- the error history of a job given back. A run whose row another transaction
-- holds locked is skipped (not waited for: a stopping worker must not hang on an
-- operator's open transaction) and returned with status NULL.
WITH
-- include: _relax_commit
,
-- include: _free_runs
, written AS (
UPDATE pgqueue_job AS j
SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'queued' ELSE 'cancelled' END,
    done_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
    locked_until = NULL,
    attempts = CASE WHEN j.cancel_requested_at IS NULL THEN greatest(j.attempts - 1, 0)
                    ELSE j.attempts END,
    last_error = CASE WHEN j.cancel_requested_at IS NULL THEN j.last_error
                      ELSE pgqueue_error_line('Cancelled', j.cancel_reason) END,
    errors = CASE WHEN j.cancel_requested_at IS NULL AND %(reason)s::text IS NULL THEN j.errors
        ELSE pgqueue_push_error(j.errors, CASE
        WHEN j.cancel_requested_at IS NULL
        THEN pgqueue_error_entry(j.attempts, 'WorkerShutdown', %(reason)s::text, '')
        ELSE pgqueue_error_entry(j.attempts, 'Cancelled', j.cancel_reason,
            'WorkerShutdown: ' || coalesce(%(reason)s::text, 'given back before it started'))
        END) END,
    error_count = CASE WHEN j.cancel_requested_at IS NULL AND %(reason)s::text IS NULL
                       THEN j.error_count ELSE least(j.error_count + 1, 1000000000) END
FROM (SELECT u.* FROM unnest(%(ids)s::bigint[], %(runs)s::bigint[]) AS u (id, run)
      WHERE u.id IN (SELECT id FROM free) OFFSET 0) AS o, relax
-- include: _still_held
RETURNING j.id, j.status
)
SELECT id, status FROM written
UNION ALL
SELECT o.id, NULL
-- include: _locked_out
;

-- name: _free_runs
-- The batch's rows this transaction can lock now, in id order. Those that use it
-- read the batch once, filtered by it (IN / NOT IN: hashed), OFFSET 0 keeping that
-- a subquery of its own: joined to it instead, the prepared statement's generic
-- plan (which expects a few rows from each) looped over it for every run, and a
-- batch of 1,000 outcomes took ten times as long as before this part existed. A row another
-- transaction holds locked (an operator's cancel() inside a long atomic block,
-- an edit in the admin) is skipped, not waited for: waiting stalled every other
-- write of the worker (each lease's renewal, each outcome of the batch) until
-- that transaction ended. Taking no lock it would wait for, a statement of these
-- can never be one side of a deadlock either.
free AS MATERIALIZED (
    SELECT j.id FROM pgqueue_job AS j WHERE j.id = ANY(%(ids)s::bigint[])
    ORDER BY j.id FOR NO KEY UPDATE OF j SKIP LOCKED
)

-- name: _locked_out
-- The rest of the batch's runs that this worker still holds (a plain read, which
-- a row lock does not block): skipped by _free_runs, neither written nor lost,
-- tried again by the caller.
FROM (SELECT u.* FROM unnest(%(ids)s::bigint[], %(runs)s::bigint[]) AS u (id, run)
      WHERE u.id NOT IN (SELECT id FROM free) OFFSET 0) AS o, pgqueue_job AS j
-- include: _still_held

-- name: _still_held
-- The fence of complete, fail, heartbeat and release: row j is still running
-- the run o names (its lease_token, which only that claim ever set), under this
-- worker. Each batch row is found by primary key, so the statement costs what
-- its batch holds. The status is compared as text (status || '') so that the
-- planner cannot read it from the partial index pgqueue_job_leases (WHERE status
-- = 'running'): that index's statistics are those of its last ANALYZE, often
-- taken with nothing running, and from them a nested loop that re-reads the
-- whole index for every row of the batch looked free. With thousands of runs
-- held (a fast drain whose outcomes arrive faster than they were written) each
-- complete took about a second, and fell further behind.
WHERE j.id = o.id AND j.lease_token = o.run AND j.locked_by = %(worker)s::text
  AND j.status || '' = 'running'

-- name: expire_orphans
-- A worker starts under an id whose lock it now holds, and rows still name that id
-- as running them: the process that claimed them is gone (a restart under a fixed
-- --worker-id: systemd's %i, a pod's name). Their leases end now, so the reaper
-- returns them at once, not after the lease. Returns their ids.
UPDATE pgqueue_job SET locked_until = now()
WHERE status = 'running' AND locked_by = %(worker)s::text AND locked_until > now()
RETURNING id;

-- name: expired_leases
-- One batch of runs whose lease expired, oldest first, locked until the reaper's
-- transaction ends: the reaper's retry policy decides each one's delay, then
-- reap writes them. Rows another reaper holds are skipped. A lease ending further
-- ahead than any LEASE a worker may hold (the beyond parameter; up to
-- 'infinity') was written by no worker, would never expire and would hold its
-- concurrency key for ever: it is taken too, from the other end of the index.
-- The spared runs (id, run) are left alone however expired: a worker's own
-- reaper spares the runs its threads still hold, which its heartbeat renews (the
-- fence reads the run, not the lease's end), so that a worker resumed after a
-- pause longer than its lease does not give back, then claim again, the jobs it
-- is still running. Empty for anyone else (reapjobs, other workers).
SELECT id, attempts, max_attempts, backoff FROM (
    SELECT id, attempts, max_attempts, backoff
    FROM pgqueue_job
    WHERE status = 'running' AND locked_until < now()
      AND (id, lease_token) NOT IN (
          SELECT s.id, s.run
          FROM unnest(%(spare_ids)s::bigint[], %(spare_runs)s::bigint[]) AS s (id, run))
    ORDER BY locked_until
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
) AS expired
UNION ALL
SELECT id, attempts, max_attempts, backoff FROM (
    SELECT id, attempts, max_attempts, backoff
    FROM pgqueue_job
    WHERE status = 'running' AND locked_until > now() + make_interval(secs => %(beyond)s::float8)
    ORDER BY locked_until DESC
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
) AS unwritten;

-- name: reap
-- Expired leases (locked by expired_leases in this transaction): back to queued
-- after the delay the retry policy chose (a failure under the job's backoff, so a
-- job that kills its worker is not taken up again at once), dead when it chose
-- none, cancelled when an operator had asked the job to stop. Idempotent: a job
-- is touched only while its lease is expired. The worker may have finished the
-- run and failed to record it (it died, hung, or lost the database), which the
-- entry says (or, for a lease no worker wrote, that one).
WITH
-- include: _relax_commit
UPDATE pgqueue_job AS j
SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                  WHEN r.delay IS NULL THEN 'dead' ELSE 'queued' END,
    run_at = CASE WHEN j.cancel_requested_at IS NULL AND r.delay IS NOT NULL
                  THEN now() + make_interval(secs => r.delay) ELSE j.run_at END,
    done_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR r.delay IS NULL THEN now() END,
    locked_until = NULL,
    last_error = CASE WHEN j.cancel_requested_at IS NOT NULL
                      THEN pgqueue_error_line('Cancelled', j.cancel_reason)
                      ELSE pgqueue_error_line('LeaseExpired', format(
                          CASE WHEN j.locked_until < now()
                               THEN 'the lease expired: worker %%1$s stopped renewing it on attempt %%2$s'
                               ELSE 'the lease of worker %%1$s on attempt %%2$s ran to %%3$s, '
                                    'longer than any worker holds one' END,
                          COALESCE(j.locked_by, '?'), j.attempts, j.locked_until)) END,
    errors = pgqueue_push_error(j.errors, pgqueue_error_entry(
        j.attempts,
        CASE WHEN j.cancel_requested_at IS NULL THEN 'LeaseExpired' ELSE 'Cancelled' END,
        CASE WHEN j.cancel_requested_at IS NOT NULL THEN j.cancel_reason
             WHEN j.locked_until < now() THEN format(
            'the lease expired: worker %%s stopped renewing it before recording an outcome: it died, hung '
            'or lost the database, and the run may have finished', COALESCE(j.locked_by, '?'))
        ELSE format('the lease of worker %%s ran to %%s, longer than any worker holds one: '
                    'no worker wrote it, and the run may have finished',
                    COALESCE(j.locked_by, '?'), j.locked_until) END,
        CASE WHEN j.cancel_requested_at IS NULL THEN '' ELSE format(
            'LeaseExpired: worker %%s stopped renewing its lease before the job stopped',
            COALESCE(j.locked_by, '?')) END)),
    error_count = least(j.error_count + 1, 1000000000)
FROM unnest(%(ids)s::bigint[], %(delays)s::float8[]) AS r (id, delay), relax
WHERE j.id = r.id AND j.status = 'running'
  AND (j.locked_until < now()
       OR j.locked_until > now() + make_interval(secs => %(beyond)s::float8))
RETURNING j.id, j.status, j.task, j.queue, j.attempts, j.max_attempts, j.locked_by;

-- name: retry
-- Dead and cancelled jobs, or queued ones waiting for a later run_at, become ready
-- now with fresh attempts and snoozes (and no stop request); the error history is kept (and the fence is on lease_token,
-- which retry leaves alone). A job whose unique_key is held by another live job is
-- left alone; of several asked for with one key, only the newest is retried.
-- Linear in the ids asked for: one lock pass, a DISTINCT ON and index probes.
-- The rows are locked in id order, as cancel locks them: taken in the order the
-- table stores them, a retry and a cancel of the same jobs each took a row the
-- other wanted next, and PostgreSQL broke the deadlock by failing one of them.
WITH asked AS MATERIALIZED (
    SELECT j.id, j.unique_key
    FROM pgqueue_job AS j
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND (j.status IN ('dead', 'cancelled') OR (j.status = 'queued' AND j.run_at > now()))
    ORDER BY j.id
    FOR UPDATE
),
newest AS (
    SELECT DISTINCT ON (unique_key) id
    FROM asked
    WHERE unique_key IS NOT NULL
    ORDER BY unique_key, id DESC
),
eligible AS (
    SELECT a.id FROM asked AS a
    WHERE a.unique_key IS NULL
       OR (a.id IN (SELECT id FROM newest) AND NOT EXISTS (
            SELECT 1 FROM pgqueue_job AS o
            WHERE o.unique_key = a.unique_key AND o.id <> a.id
              AND o.status IN ('queued', 'running')))
),
retried AS (
    UPDATE pgqueue_job AS j
    SET status = 'queued', attempts = 0, snoozes = 0, run_at = now(), done_at = NULL,
        locked_until = NULL, locked_by = NULL, cancel_requested_at = NULL, cancel_reason = ''
    FROM eligible
    WHERE j.id = eligible.id
    RETURNING j.id, j.queue
),
woken AS (
    SELECT count(pg_notify(%(channel)s::text, queue)) AS n
    FROM (SELECT DISTINCT queue FROM retried) AS q
    WHERE %(notify)s::bool
)
SELECT COALESCE((SELECT array_agg(id ORDER BY id) FROM retried), '{}') AS ids,
       (SELECT n FROM woken) AS woken;

-- name: lock_for_retry
-- A retry of more than one batch takes its rows first, in id order, batch by
-- batch (then writes them newest batch first): as cancel takes them, so that the
-- two cannot each hold rows the other wants next. So does a batch that goes on
-- one job at a time, newest first (an enqueue of one of its keys raced it), once
-- its failed statement's savepoint let its locks go. Only the rows retry takes: a
-- running one is left to its worker's writes.
SELECT count(*) AS locked FROM (
    SELECT j.id FROM pgqueue_job AS j
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND (j.status IN ('dead', 'cancelled') OR (j.status = 'queued' AND j.run_at > now()))
    ORDER BY j.id
    FOR UPDATE
) AS taken;

-- name: cancel
-- Queued jobs become cancelled at once, with the reason. Running ones keep
-- running, with the request stored for the worker that holds them
-- (cancel_requested_at, and the first reason given): it learns it at its next
-- heartbeat, or at once from the NOTIFY sent to it here, whose payload (JSON) no
-- queue name can be. The rows are locked first and read in their latest version,
-- so a job claimed while this statement waited for it is asked to stop, not
-- missed; the updates then take the state from "asked", never from their own
-- (older) snapshot. Returns each job acted on with its status, and for a running
-- one whether it had been asked before (it keeps that first request): read from
-- the locked row, not from the request's time, which may come after this
-- transaction began (another cancel that committed while this one waited).
WITH asked AS MATERIALIZED (
    SELECT j.id, j.status, j.cancel_requested_at IS NOT NULL AS asked_before
    FROM pgqueue_job AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('queued', 'running')
    ORDER BY j.id
    FOR UPDATE
),
cancelled AS (
    UPDATE pgqueue_job AS j
    SET status = 'cancelled', done_at = now(), locked_until = NULL,
        cancel_reason = %(reason)s::text,
        last_error = pgqueue_error_line('Cancelled', %(reason)s::text),
        errors = pgqueue_push_error(j.errors, pgqueue_error_entry(j.attempts, 'Cancelled',
                                                                  %(reason)s::text, '')),
        error_count = least(j.error_count + 1, 1000000000)
    FROM asked AS a
    WHERE j.id = a.id AND a.status = 'queued'
    RETURNING j.id, j.status
),
stopping AS (
    UPDATE pgqueue_job AS j
    SET cancel_requested_at = COALESCE(j.cancel_requested_at, now()),
        cancel_reason = CASE WHEN j.cancel_requested_at IS NULL THEN %(reason)s::text
                             ELSE j.cancel_reason END
    FROM asked AS a
    WHERE j.id = a.id AND a.status = 'running'
    RETURNING j.id, j.status, j.locked_by, a.asked_before
),
woken AS (
    SELECT count(pg_notify(%(channel)s::text, json_build_object('abort', locked_by)::text)) AS n
    FROM (SELECT DISTINCT locked_by FROM stopping) AS w
    WHERE %(notify)s::bool
)
SELECT id, status, false AS asked_before FROM cancelled
UNION ALL
-- (woken is read so that its pg_notify() calls are evaluated: it always has a row.)
SELECT id, status, asked_before FROM stopping WHERE (SELECT n FROM woken) IS NOT NULL;

-- name: pause_queue
-- From now on no claim takes the queue's jobs; true if it was not paused. Workers
-- are told when this commits (a JSON payload, which no queue name can be), so that
-- the jobs of the queue they claimed ahead and have not started go back to it at
-- their next heartbeat, which this hurries. "woken" is read so that pg_notify()
-- is evaluated.
WITH before AS (SELECT paused_at FROM pgqueue_queue WHERE name = %(name)s::text),
paused AS (
    INSERT INTO pgqueue_queue (name, paused_at) VALUES (%(name)s::text, now())
    ON CONFLICT (name) DO UPDATE SET paused_at = COALESCE(pgqueue_queue.paused_at, now())
    RETURNING (SELECT paused_at FROM before) IS NULL AS changed
),
woken AS (
    SELECT count(pg_notify(%(channel)s::text,
                           json_build_object('paused', %(name)s::text)::text)) AS n
    WHERE %(notify)s::bool
)
SELECT changed, (SELECT n FROM woken) AS woken FROM paused;

-- name: resume_queue
-- Claims take the queue's jobs again, and its workers are woken when this
-- commits; true if it was paused. "woken" is read so that pg_notify() is evaluated.
WITH resumed AS (
    UPDATE pgqueue_queue SET paused_at = NULL
    WHERE name = %(name)s::text AND paused_at IS NOT NULL
    RETURNING name
),
woken AS (
    SELECT count(pg_notify(%(channel)s::text, name)) AS n FROM resumed WHERE %(notify)s::bool
)
SELECT EXISTS (SELECT 1 FROM resumed) AS changed, (SELECT n FROM woken) AS woken;

-- name: queue_paused
-- Whether the queue is paused (resume takes a paused queue whatever its name).
SELECT EXISTS (
    SELECT 1 FROM pgqueue_queue WHERE name = %(name)s::text AND paused_at IS NOT NULL
) AS paused;

-- name: paused_queues
-- A paused_at Python cannot load (a row written by hand: infinity, a year BC)
-- reads as the nearest bound: the queue is paused all the same.
SELECT name,
       least(greatest(paused_at, %(earliest)s::timestamptz), %(latest)s::timestamptz) AS paused_at
FROM pgqueue_queue WHERE paused_at IS NOT NULL ORDER BY name;

-- name: prune
-- One batch of finished jobs older than the bound, oldest first, then those whose
-- done_at no worker wrote (_done_unwritten: none, then ahead); how many it chose
-- and how many it deleted. Each kind is read from its own range of the finished
-- index (pgqueue_job_finished, by done_at), whatever the plan cache mode. A row another transaction holds (a retry,
-- the admin's Delete) is skipped, never waited for: they lock their rows in id
-- order, this batch in done_at order, and waiting on each other deadlocked; a
-- later batch or pass takes it if it is still finished. The conditions are checked
-- again on the row being deleted.
WITH old AS MATERIALIZED (
    SELECT id FROM pgqueue_job
    WHERE
-- include: _finished_asked
      AND done_at < %(before)s::timestamptz
    ORDER BY done_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
),
unwritten AS MATERIALIZED (
    SELECT id FROM pgqueue_job
    WHERE
-- include: _finished_asked
      AND done_at IS NULL
    LIMIT greatest(%(limit)s::int - (SELECT count(*) FROM old), 0)
    FOR UPDATE SKIP LOCKED
),
-- Apart from the rows without done_at, and in the index's order: planned without
-- the beyond parameter, an OR of the two, or this range unordered, read the
-- whole table for the few rows it finds.
ahead AS MATERIALIZED (
    SELECT id FROM pgqueue_job
    WHERE
-- include: _finished_asked
      AND done_at > now() + make_interval(secs => %(beyond)s::float8)
    ORDER BY done_at
    LIMIT greatest(%(limit)s::int - (SELECT count(*) FROM old) - (SELECT count(*) FROM unwritten), 0)
    FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT id FROM old UNION ALL SELECT id FROM unwritten UNION ALL SELECT id FROM ahead
),
deleted AS (
    DELETE FROM pgqueue_job
    WHERE id IN (SELECT id FROM batch)
      AND status = ANY(%(statuses)s::text[])
      AND (done_at < %(before)s::timestamptz OR
-- include: _done_unwritten
          )
    RETURNING 1
)
SELECT (SELECT count(*) FROM batch) AS chosen, (SELECT count(*) FROM deleted) AS deleted;

-- name: count_prunable
-- What prune would delete, counted as it chooses it: each kind a range of the
-- finished index (an OR of the two kinds would read the whole index).
SELECT (SELECT count(*) FROM pgqueue_job
        WHERE
-- include: _finished_asked
        AND done_at < %(before)s::timestamptz)
       + (SELECT count(*) FROM pgqueue_job
          WHERE
-- include: _finished_asked
          AND
-- include: _done_unwritten
         ) AS jobs;

-- name: _finished_asked
-- The statuses asked for among the finished ones, these written out as the
-- finished index's own predicate (pgqueue_job_finished). Planned without the
-- statuses' value (a generic plan: plan_cache_mode = force_generic_plan on the
-- server or the role, or PostgreSQL's own choice after five executions of a
-- prepared statement), status = ANY(...) alone cannot show the planner that the
-- partial index holds every row it asks for: prune read the whole table, and
-- sorted it, at every batch.
status IN ('done', 'dead', 'cancelled') AND status = ANY(%(statuses)s::text[])

-- name: _done_unwritten
-- A finished job's done_at that no worker wrote: none, or further ahead than any
-- worker writes (the beyond parameter). A row written by hand (a status set with
-- no done_at; infinity, a year past 9999) finished at a time no one can tell,
-- and prune takes it whatever its bound. Workers write now(), but a prune in a
-- transaction open for a while sees the jobs finished since as ahead of its own
-- now(): those are not taken, hence the margin.
(done_at IS NULL OR done_at > now() + make_interval(secs => %(beyond)s::float8))

-- name: _relax_commit
-- The worker's own bookkeeping (claim, complete, fail, heartbeat, release, reap)
-- need not wait for the WAL flush: losing its last moments in a crash can only
-- run a job again, which at-least-once allows. The setting is the statement's
-- transaction's own (set_config(..., true) is read when it commits), never the
-- session's: behind a transaction pooler a session setting would stay on the
-- server connection for whoever used it next, such as a web request whose
-- enqueue must be durable. The commit parameter is 'off' for the worker's own
-- statements (ASYNC_COMMIT), and NULL (the setting unchanged) for anyone else.
relax AS MATERIALIZED (
    SELECT set_config('synchronous_commit',
                      COALESCE(%(commit)s::text, current_setting('synchronous_commit')),
                      true) AS commit_mode
)

-- name: stats
-- Counts by queue and status, with what monitoring should alert on.
-- A run_at of -infinity (the column takes it; a row written by hand) counts as
-- the year 1: now() minus -infinity is an error, which would fail every reader.
-- The deaths of the last 24 hours (the seconds parameter) are _dead_within's.
SELECT queue, status, count(*) AS jobs,
       extract(epoch FROM now() - min(greatest(run_at, '0001-01-01 00:00+00'::timestamptz))
                                   FILTER (WHERE status = 'queued' AND run_at <= now()))
           AS oldest_ready_age,
       count(*) FILTER (WHERE
-- include: _dead_within
       ) AS dead_last_24h,
       count(*) FILTER (WHERE status = 'running' AND locked_until < now()) AS lease_expired
FROM pgqueue_job
GROUP BY queue, status
ORDER BY queue, status;

-- name: backend_pid
-- The server process answering. Behind a pooler it is not the one whose key the
-- connection's start-up announced (django_pgqueue.pooler). And the database it
-- serves: a worker's session must be on its jobs' (worker.session).
SELECT pg_backend_pid() AS pid, current_database() AS database;

-- name: lock_worker_id
-- A worker id's lock, held by the worker's session connection for its lifetime;
-- false when another live session (another worker with the same id) holds it.
-- Session-scoped on purpose: only ever run on a session connection.
SELECT pg_try_advisory_lock(%(key)s::bigint) AS locked;

-- name: keep_session
-- A worker's session sits idle by design (it waits for NOTIFY and holds the id's
-- lock): a server's idle_session_timeout (PostgreSQL 14+), set for the role or in
-- the connection's options, would close it every few moments, dropping the lock
-- and the notifications sent meanwhile. Not through a pooler: a SET there stays
-- on a server connection other clients get.
SET idle_session_timeout = 0;

-- name: worker_register
-- A worker's row in the registry (pgqueue_worker), written when it starts and
-- rewritten by each of its heartbeats while it runs. A restarted worker that
-- reuses its id (a pod name) takes its row over. alive_until is when the row is
-- shown as gone unless the next heartbeat moves it on. lock_key is the key of the
-- advisory lock its session holds on its id and lock_pid the server process of that
-- session (both null with no session, or one through a pooler, which holds no such
-- lock): the lock ends with the process, so a killed worker counts as gone at once
-- (schedulers_up_since, which asks pg_locks; a heartbeat does not).
INSERT INTO pgqueue_worker (
    id, hostname, pid, queues, concurrency, version, started_at, last_seen, alive_until,
    schedules, schedule_names, jobs_running, jobs_done, lock_key, lock_pid
)
VALUES (
    %(worker)s::text, %(hostname)s::text, %(pid)s::int, %(queues)s::jsonb, %(concurrency)s::int,
    %(version)s::text, now(), now(), now() + make_interval(secs => %(gone_after)s::float8),
    %(schedules)s::bool, %(schedule_names)s::jsonb, %(jobs_running)s::int, %(jobs_done)s::bigint,
    CASE WHEN %(lock_pid)s::int IS NOT NULL THEN %(lock_key)s::bigint END, %(lock_pid)s::int
)
ON CONFLICT (id) DO UPDATE
SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
    concurrency = EXCLUDED.concurrency, version = EXCLUDED.version,
    schedules = EXCLUDED.schedules, schedule_names = EXCLUDED.schedule_names,
    lock_key = EXCLUDED.lock_key, lock_pid = EXCLUDED.lock_pid,
    started_at = CASE WHEN %(starting)s::bool THEN EXCLUDED.started_at
                      ELSE pgqueue_worker.started_at END,
    last_seen = EXCLUDED.last_seen, alive_until = EXCLUDED.alive_until,
    jobs_running = EXCLUDED.jobs_running, jobs_done = EXCLUDED.jobs_done
RETURNING id;

-- name: database_now
-- The database's clock, which writes alive_until and locked_until: readers that
-- tell live workers from gone ones, or leases from expired ones, use it, not theirs.
SELECT now() AS now;

-- name: worker_leave
-- A worker that exits removes its row.
DELETE FROM pgqueue_worker WHERE id = %(worker)s::text RETURNING id;

-- name: workers_forget
-- Rows of workers gone for longer than the bound (killed, lost): shown as gone
-- until then, deleted by any running worker's maintenance thread; kept while a job
-- still runs under the id (a lease of hours outlasts the bound), so that the job
-- reads as on a gone worker until the reaper returns it. A row whose alive_until
-- no heartbeat wrote (_alive_until_written) is shown as gone, since no one can tell
-- when, and deleted too (a live worker's next heartbeat writes its row again).
DELETE FROM pgqueue_worker AS w
WHERE (w.alive_until < now() - make_interval(secs => %(after)s::float8)
       AND NOT EXISTS (SELECT 1 FROM pgqueue_job AS j
                       WHERE j.status = 'running' AND j.locked_by = w.id))
   OR NOT (
-- include: _alive_until_written
)
RETURNING id;

-- name: _alive_until_written
-- An alive_until a heartbeat may have written: no further ahead than any writes
-- (the beyond parameter, presence.UNWRITTEN_ALIVE, which the registry's Python
-- readers use too: monitoring.models.alive_now). A row written by hand (infinity,
-- a year 3000) vouches for no worker: every reader calls it gone.
alive_until <= now() + make_interval(secs => %(beyond)s::float8)

-- name: refresh_queue_gauges
-- The queue gauges (jobs by queue and status, the oldest ready job's age), kept
-- in the small table pgqueue_queue_gauge so that every worker and the web tier
-- can serve them for the price of reading it. One caller at a time recomputes
-- them, once they are older than max_age and only if it wins the advisory lock;
-- everyone else reads the table as it is. Concurrent refreshes (possible in a
-- short window around a commit) upsert the same rows, so none is duplicated.
-- A refreshed_at ahead of the clock (a row written by hand: infinity, a day
-- ahead) makes nothing fresh, or the gauges would never be recomputed again;
-- its age reads as 0 (-infinity's as the year 1's), as now() - infinity fails.
WITH stale AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1 FROM pgqueue_queue_gauge
        WHERE refreshed_at > now() - make_interval(secs => %(max_age)s::float8)
          AND refreshed_at <= now() + make_interval(secs => %(max_age)s::float8)
    ) AS stale
),
due AS MATERIALIZED (
    SELECT 1 AS due FROM stale WHERE stale AND pg_try_advisory_xact_lock(%(lock)s::bigint)
),
-- include: _queue_gauges
,
cleared AS (
    DELETE FROM pgqueue_queue_gauge AS g
    WHERE EXISTS (SELECT 1 FROM due)
      AND NOT EXISTS (SELECT 1 FROM fresh AS f WHERE f.queue = g.queue AND f.status = g.status)
),
written AS (
    INSERT INTO pgqueue_queue_gauge (queue, status, jobs, oldest_ready_age, estimated, refreshed_at)
    SELECT queue, status, jobs, oldest_ready_age, estimated, now() FROM fresh
    ON CONFLICT (queue, status) DO UPDATE
    SET jobs = EXCLUDED.jobs, oldest_ready_age = EXCLUDED.oldest_ready_age,
        estimated = EXCLUDED.estimated, refreshed_at = EXCLUDED.refreshed_at
)
SELECT queue, status, jobs, oldest_ready_age, estimated, 0::float8 AS age FROM fresh
UNION ALL
SELECT queue, status, jobs, oldest_ready_age, estimated,
       extract(epoch FROM now() - least(greatest(refreshed_at, '0001-01-01 00:00+00'::timestamptz),
                                        now()))::float8 AS age
FROM pgqueue_queue_gauge
WHERE NOT EXISTS (SELECT 1 FROM due)
ORDER BY queue, status;

-- name: queue_gauges
-- The same numbers computed now, written nowhere (queuestats --check).
WITH due AS (SELECT 1 AS due),
-- include: _queue_gauges
SELECT queue, status, jobs, oldest_ready_age, estimated, 0::float8 AS age FROM fresh
ORDER BY queue, status;

-- name: _queue_gauges
-- Cheap whatever the table holds. Queued and running jobs are counted exactly,
-- from the partial indexes that hold only them (pgqueue_job_ready_by_queue,
-- index-only, and pgqueue_job_leases): the cost follows the backlog and the jobs
-- running, never the finished rows. Finished jobs are counted exactly while the
-- finished index holds fewer than exact_limit rows (dead ones while the dead
-- index does), and estimated beyond it from the planner's statistics: the
-- table's size now (reltuples scaled to its current pages, as the planner does)
-- times the frequencies ANALYZE found for the status and the queue.
queued AS (
    -- (-infinity counts as the year 1, as in stats.)
    SELECT queue, 'queued'::text AS status, count(*) AS jobs,
           extract(epoch FROM now() - min(greatest(run_at, '0001-01-01 00:00+00'::timestamptz))
                                   FILTER (WHERE run_at <= now()))::float8
               AS oldest_ready_age
    FROM pgqueue_job
    WHERE status = 'queued' AND EXISTS (SELECT 1 FROM due)
    GROUP BY queue
),
running AS (
    SELECT queue, 'running'::text AS status, count(*) AS jobs, NULL::float8 AS oldest_ready_age
    FROM pgqueue_job
    WHERE status = 'running' AND EXISTS (SELECT 1 FROM due)
    GROUP BY queue
),
-- With nothing due, few_finished reads no row and says "few": every use of it
-- below also asks for due, or a caller that is not refreshing would count every
-- finished job and return it beside the stored numbers.
few_finished AS MATERIALIZED (
    SELECT count(*) < %(exact_limit)s::int AS few FROM (
        SELECT 1 FROM pgqueue_job
        WHERE status IN ('done', 'dead', 'cancelled') AND EXISTS (SELECT 1 FROM due)
        LIMIT %(exact_limit)s::int
    ) AS f
),
few_dead AS MATERIALIZED (
    SELECT count(*) < %(exact_limit)s::int AS few FROM (
        SELECT 1 FROM pgqueue_job
        WHERE status = 'dead' AND EXISTS (SELECT 1 FROM due) AND NOT (SELECT few FROM few_finished)
        LIMIT %(exact_limit)s::int
    ) AS d
),
finished_exact AS (
    SELECT queue, status, count(*) AS jobs
    FROM pgqueue_job
    WHERE status IN ('done', 'dead', 'cancelled') AND (SELECT few FROM few_finished)
      AND EXISTS (SELECT 1 FROM due)
    GROUP BY queue, status
    UNION ALL
    SELECT queue, status, count(*) AS jobs
    FROM pgqueue_job
    WHERE status = 'dead' AND NOT (SELECT few FROM few_finished) AND (SELECT few FROM few_dead)
      AND EXISTS (SELECT 1 FROM due)
    GROUP BY queue, status
),
table_rows AS (
    SELECT CASE WHEN c.relpages > 0
                THEN c.reltuples / c.relpages
                     * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
                ELSE greatest(c.reltuples, 0) END AS n
    FROM pg_class AS c
    WHERE c.oid = 'pgqueue_job'::regclass
),
frequencies AS (
    SELECT s.attname, m.value, m.freq
    FROM pg_stats AS s
    CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs)
        AS m (value, freq)
    -- The statistics of the table read above, in whichever schema of the search
    -- path it is: current_schema() is the path's first schema, which may hold no
    -- such table (tenant, public).
    WHERE s.schemaname = (SELECT n.nspname FROM pg_class AS c
                          JOIN pg_namespace AS n ON n.oid = c.relnamespace
                          WHERE c.oid = 'pgqueue_job'::regclass)
      AND s.tablename = 'pgqueue_job'
      AND s.attname IN ('queue', 'status') AND NOT (SELECT few FROM few_finished)
      AND EXISTS (SELECT 1 FROM due)
),
finished_estimated AS (
    SELECT q.value AS queue, st.value AS status,
           round((SELECT n FROM table_rows) * q.freq * st.freq)::bigint AS jobs
    FROM frequencies AS q, frequencies AS st
    WHERE q.attname = 'queue' AND st.attname = 'status'
      AND st.value IN ('done', 'dead', 'cancelled')
      AND (st.value <> 'dead' OR NOT (SELECT few FROM few_dead))
),
fresh AS (
    SELECT queue, status, jobs, oldest_ready_age, false AS estimated FROM queued
    UNION ALL
    SELECT queue, status, jobs, oldest_ready_age, false FROM running
    UNION ALL
    SELECT queue, status, jobs, NULL::float8, false FROM finished_exact
    UNION ALL
    SELECT queue, status, jobs, NULL::float8, true FROM finished_estimated WHERE jobs > 0
    UNION ALL
    -- Past the limit, the finished jobs were not counted: this row (no queue is
    -- named '') says so even when the statistics estimated none of them (a table
    -- never analyzed), so that no reader takes a missing count for 0. A second
    -- one says the dead jobs were not counted either; without it they were
    -- (few_dead), and a queue that has none has 0 of them.
    SELECT '', 'done', 0, NULL::float8, true
    WHERE NOT (SELECT few FROM few_finished) AND EXISTS (SELECT 1 FROM due)
    UNION ALL
    SELECT '', 'dead', 0, NULL::float8, true
    WHERE NOT (SELECT few FROM few_finished) AND NOT (SELECT few FROM few_dead)
      AND EXISTS (SELECT 1 FROM due)
)

-- name: dead_since
-- Jobs buried dead in the last window (_dead_within), by queue: a range of the
-- finished index (pgqueue_job_finished, by done_at, whose condition the first
-- line repeats), so its cost is the jobs finished in the window.
SELECT queue, count(*) AS jobs
FROM pgqueue_job
WHERE status IN ('done', 'dead', 'cancelled') AND
-- include: _dead_within
GROUP BY queue
ORDER BY queue;

-- name: _dead_within
-- A job buried dead within the last window (the seconds parameter), by its
-- done_at. A done_at ahead of the clock (written by hand: the workers write
-- now()) is no death of any window: infinity counted for ever (and failed
-- queuestats --check --max-dead for ever).
status = 'dead' AND done_at > now() - make_interval(secs => %(seconds)s::float8)
AND done_at <= now()

-- name: schedules_lock
-- Held by a transaction that writes several schedule rows (schedules_sync, an
-- operator's switch), until it ends: two such writers, each locking its own rows
-- first and the other's after (workers with different PERIODIC settings), would
-- deadlock. schedule_tick writes one row and needs no such lock.
SELECT 1 AS locked FROM pg_advisory_xact_lock(%(lock)s::bigint);

-- name: schedules_lock_wait
-- Bounds the transaction's waits for a lock (run before schedules_lock, and again
-- after the writes with the lock_timeout it gave back as before: a switch called in
-- a transaction of the caller's leaves it as it was). A transaction left open on
-- the schedule table (an UPDATE by hand not committed, a process paused in its own
-- sync) would otherwise hold a starting worker's scheduler, every schedule of it,
-- or an operator's switch, for as long as it stays open.
SELECT b.before, set_config('lock_timeout', %(lock_wait)s::text, true) AS lock_wait
FROM (SELECT current_setting('lock_timeout') AS before OFFSET 0) AS b;

-- name: schedules_sync
-- The schedules a worker's settings declare (PGQUEUE["PERIODIC"]), written when its
-- scheduler starts: a new one is added, enabled and never ticked; a known one takes
-- the settings' task, expression and time zone (its enabled switch and its last
-- tick stay); one the settings no longer name is marked not configured, and its row
-- and its jobs stay for people to read. Run after schedules_lock, in its
-- transaction: one sync at a time.
-- One declared again after it was removed, switched on in the settings ("enabled")
-- after the latest worker to start had it off (or before any worker wrote it: a row
-- `schedules --enable` made), or given another expression or time zone, goes on
-- from its next tick: the ticks that fell while no worker ticked it, or that the
-- old expression did not have, are not due. Its restarted_at (no tick before it
-- is taken; last_tick keeps the last real one, for people to read) moves to two
-- seconds ago, not to now, so that a tick a worker still on older settings (which
-- tick it) is about to take is not lost: a scheduler looks once a second. The
-- settings' "enabled" is kept in the row for that, and nothing else. The time zone
-- of an "every Ns" schedule (TIME_ZONE's, recorded for people to read) gives it no
-- other tick: a new one does not restart it. Each row
-- comes back with resume_from, the later of the two, where its ticking goes on.
-- A time no worker writes (a row written by hand: infinity, -infinity, a year BC
-- or past 9999; outside earliest and latest, the times Python holds, exclusive)
-- counts as none, here as in schedule_tick: one such row must not fail the sync,
-- which would stop every schedule. Such a created_at reads as now.
WITH declared AS (
    SELECT name, task, expression, timezone, on_in_settings
    FROM unnest(%(names)s::text[], %(tasks)s::text[], %(expressions)s::text[],
                %(timezones)s::text[], %(enabled)s::bool[])
         AS d (name, task, expression, timezone, on_in_settings)
    ORDER BY name
),
upserted AS (
    INSERT INTO pgqueue_schedule AS s (
        name, task, expression, timezone, enabled, configured, settings_enabled, ticks,
        created_at, updated_at
    )
    SELECT name, task, expression, timezone, true, true, on_in_settings, 0, now(), now()
    FROM declared
    ON CONFLICT (name) DO UPDATE
    SET task = EXCLUDED.task, expression = EXCLUDED.expression, timezone = EXCLUDED.timezone,
        configured = true,
        settings_enabled = EXCLUDED.settings_enabled,
        restarted_at = CASE WHEN NOT s.configured
                              OR (EXCLUDED.settings_enabled AND NOT s.settings_enabled)
                              OR s.expression IS DISTINCT FROM EXCLUDED.expression
                              OR (s.timezone IS DISTINCT FROM EXCLUDED.timezone
                                  AND EXCLUDED.expression NOT LIKE 'every %%')
                            THEN GREATEST(CASE WHEN s.restarted_at < %(latest)s::timestamptz
                                               THEN s.restarted_at END,
                                          now() - interval '2 seconds')
                            ELSE s.restarted_at END,
        updated_at = CASE
            WHEN (s.task, s.expression, s.timezone, s.configured, s.settings_enabled)
                 IS DISTINCT FROM (EXCLUDED.task, EXCLUDED.expression, EXCLUDED.timezone, true,
                                   EXCLUDED.settings_enabled)
            THEN now() ELSE s.updated_at END
    RETURNING s.name, s.enabled,
              GREATEST(
                  CASE WHEN s.last_tick > %(earliest)s::timestamptz
                        AND s.last_tick < %(latest)s::timestamptz THEN s.last_tick END,
                  CASE WHEN s.restarted_at > %(earliest)s::timestamptz
                        AND s.restarted_at < %(latest)s::timestamptz THEN s.restarted_at END
              ) AS resume_from,
              CASE WHEN s.created_at > %(earliest)s::timestamptz
                    AND s.created_at < %(latest)s::timestamptz THEN s.created_at
                   ELSE now() END AS created_at
),
removed AS (
    UPDATE pgqueue_schedule
    SET configured = false, updated_at = now()
    WHERE configured AND name <> ALL (%(names)s::text[])
    RETURNING name
)
SELECT name, enabled, resume_from, created_at, now() AS now,
       (SELECT count(*) FROM removed) AS removed
FROM upserted
UNION ALL
SELECT NULL, NULL, NULL, NULL, now(), (SELECT count(*) FROM removed)
WHERE NOT EXISTS (SELECT FROM declared);

-- name: schedule_tick
-- One tick of a schedule, enqueued once across every worker and host. The
-- compare-and-set on last_tick and the job's insert are one statement: both
-- happen or neither, so a worker that dies cannot leave a tick marked and its job
-- missing. A second worker with the same tick waits on the first one's row lock,
-- then finds last_tick already there and inserts nothing. No tick at or before
-- the schedule's restarted_at is taken; a last_tick or restarted_at at or past
-- latest (a row written by hand: no worker writes one, see schedules_sync) counts
-- as none, and the tick replaces that last_tick. A disabled schedule's
-- tick is taken and enqueues nothing (not counted in ticks), so that when it is
-- enabled again it goes on from its next tick, not from the ticks it skipped.
-- Each worker ticks the definition its own settings give (the row
-- shows the one the latest worker to start wrote): a worker with other settings
-- must never stop the others' schedules. The job's run_at is the tick, so every
-- job says which tick it belongs to (its created_at is now(), as every enqueue's, so
-- the Tasks backend reports the tick as its run_after). A live job
-- holding the task's unique_key makes the tick enqueue nothing: the tick is
-- taken, its id comes back NULL, and last_job_id and ticks stay as they were
-- (the last job is still the live one). The row is counted from what the insert
-- did, so a job holding the key enqueued (and committed) while the insert waited
-- on it counts the same way. known is false when the schedule has no row (deleted
-- by hand while workers ran): nothing is taken, and the scheduler writes it again.
-- lock_wait (a scheduler's, NULL for the setting as it
-- is) bounds the statement's waits for a lock, the row's or the key's (a job an
-- open transaction enqueued): a scheduler would otherwise wait behind it with
-- every other schedule, and every worker's with it, on the row. Set for the
-- statement's transaction only (see _relax_commit), before the row is locked.
WITH bounded AS MATERIALIZED (
    SELECT set_config('lock_timeout',
                      COALESCE(%(lock_wait)s::text, current_setting('lock_timeout')),
                      true) AS lock_wait
),
taken AS (
    SELECT name, enabled FROM pgqueue_schedule
    WHERE name = %(name)s::text AND (SELECT lock_wait FROM bounded) IS NOT NULL
      AND (last_tick IS NULL OR last_tick < %(tick)s::timestamptz
           OR last_tick >= %(latest)s::timestamptz)
      AND (restarted_at IS NULL OR restarted_at < %(tick)s::timestamptz
           OR restarted_at >= %(latest)s::timestamptz)
    FOR UPDATE
),
inserted AS (
    INSERT INTO pgqueue_job (
        task, args, kwargs, queue, priority, status, attempts, max_attempts, run_at,
        last_error, errors, worker_ids, unique_key, concurrency_key, backoff, retry_policy,
        schedule, created_at
    )
    SELECT %(job_task)s::text, %(args)s::jsonb, %(kwargs)s::jsonb, %(queue)s::text,
           %(priority)s::int, 'queued', 0, %(max_attempts)s::int, %(tick)s::timestamptz,
           '', '[]', '[]', %(unique_key)s::text, %(concurrency_key)s::text, %(backoff)s::float8,
           %(retry_policy)s::jsonb, %(name)s::text, now()
    FROM taken AS t
    WHERE t.enabled
    ON CONFLICT (unique_key) WHERE status IN ('queued', 'running') AND unique_key IS NOT NULL
    DO NOTHING
    RETURNING id, queue
),
ticked AS (
    UPDATE pgqueue_schedule AS s
    SET last_tick = %(tick)s::timestamptz,
        last_job_id = COALESCE((SELECT id FROM inserted), s.last_job_id),
        -- Saturates: a count written by hand at bigint's top must not make every
        -- tick of the schedule fail (and, with it, the scheduler's other schedules);
        -- a tick that enqueues nothing leaves it as it is, at the top too.
        ticks = least(s.ticks::numeric + (SELECT count(*) FROM inserted),
                      9223372036854775807)::bigint
    FROM taken AS t
    WHERE s.name = t.name
    RETURNING s.enabled
)
SELECT (SELECT count(*) FROM ticked WHERE enabled) AS ticked, i.id,
       (SELECT pg_notify(%(channel)s::text, i.queue) WHERE %(notify)s::bool) IS NULL AS notified,
       EXISTS (SELECT FROM pgqueue_schedule WHERE name = %(name)s::text) AS known
FROM (SELECT 1) AS one
LEFT JOIN inserted AS i ON true;

-- name: schedulers_up_since
-- For each schedule, since when a scheduler that runs it has been up without a
-- break, as far as the registry can tell: the start of the oldest worker still
-- alive whose scheduler runs it (not a --burst or --max-jobs worker, and the
-- schedule enabled in its settings). Ticks after it were due while one ran, so
-- none of them counts as missed; a worker up all along with other settings
-- does not count. (A schedule_names that is not a list, written by hand, names
-- nothing.) A worker whose row has a lock_pid is alive only while that server
-- process holds its id's lock: a killed one's ended with its session, before
-- alive_until. The pid matters: pg_locks shows every database of the server, where
-- a worker of another database (another deployment, a test run) with the same id
-- holds the same key. A started_at outside the times a worker writes (a row
-- written by hand: -infinity, a year past 9999), which Python could not load,
-- counts as no start: that row vouches for no tick; nor does an alive_until no
-- heartbeat wrote (_alive_until_written).
SELECT n.name, min(w.started_at) AS since
FROM pgqueue_worker AS w
CROSS JOIN LATERAL jsonb_array_elements_text(
    CASE WHEN jsonb_typeof(w.schedule_names) = 'array' THEN w.schedule_names
         ELSE '[]'::jsonb END) AS n (name)
WHERE w.alive_until >= now() AND w.schedules AND
-- include: _alive_until_written
  AND w.started_at > %(earliest)s::timestamptz AND w.started_at < %(latest)s::timestamptz
  AND (w.lock_pid IS NULL OR EXISTS (
      SELECT 1 FROM pg_locks AS l
      WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.pid = w.lock_pid
        AND l.classid = ((w.lock_key >> 32) & 4294967295)::oid
        AND l.objid = (w.lock_key & 4294967295)::oid))
GROUP BY n.name;
