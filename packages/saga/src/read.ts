import {
  findJobsByKey,
  jobStates,
  runSql,
  withSnapshot,
  type JobState,
  type Queryable,
} from '@skiplock/queue/engine';
import type pg from 'pg';
import { compensationKey, MAX_SAGA_ID_CHARS, SAGA_ID_UNFIT, stepKey, timeoutKey } from './keys.js';
import { SagaError } from './errors.js';
import { sagaStatus, type SagaStatus, type SagaStepKind, type SagaStepStatus } from './schema.js';
import {
  castCursorTime,
  countSagasByStatus,
  SAGA_SCAN_LIMIT,
  sagaWindowFilters,
  selectChildren,
  selectSaga,
  selectSagaNames,
  selectSagaReach,
  selectSagas,
  type ChildRow,
  type SagaListFilter,
  type SagaReadRow,
} from './sql/read.js';
import { selectSignals, type SignalRow } from './sql/signals.js';
import { selectHistories, selectHistory, type HistoryRow } from './sql/steps.js';

/** One step or compensation in a saga's history. */
export interface StepRecord {
  step: string;
  kind: SagaStepKind;
  status: SagaStepStatus;
  attempts: number;
  jobId: string | null;
  output: unknown;
  error: string | null;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export interface SignalRecord {
  name: string;
  payload: unknown;
  receivedAt: Date;
  consumedAt: Date | null;
}

export interface SagaSummary {
  id: string;
  name: string;
  version: number;
  status: SagaStatus;
  currentStep: string | null;
  currentKind: SagaStepKind | null;
  currentJobId: string | null;
  /** The pivot completed: the saga can no longer compensate. */
  pivoted: boolean;
  cancelRequested: boolean;
  deadline: Date | null;
  error: string | null;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
  /**
   * The definition's lock key of the input (see `lockKey`): while this saga is `queued`, the
   * sagas before it with the key run first.
   */
  lockKey: string | null;
  /** A child saga's parent and the parent's step that started it; null for any other saga. */
  parent: { id: string; step: string } | null;
  /** Steps and compensations in the order the saga reached them: `listSagas({ history: true })`. */
  history?: StepRecord[];
}

export interface SagaView extends SagaSummary {
  input: unknown;
  /** Steps and compensations in the order the saga reached them. */
  history: StepRecord[];
  signals: SignalRecord[];
  /** The child sagas its `.child()` steps started (each `getSaga` shows its own tree below). */
  children: { id: string; name: string; step: string; status: SagaStatus }[];
  /**
   * Set while the saga is `running` or `compensating` on a job that can no longer move it: dead
   * or cancelled where no saga hook ran (a worker or sweeper without the saga's job types, an
   * operator's cancel), or deleted. Also while it is `waiting` before its pivot on a timed wait
   * or a sleep whose timeout or wake job can no longer end it (`kind: 'timeout'`): one found dead
   * or cancelled under the step's timeout key, or none found on a saga with a deadline (whose
   * every wait has a timeout job). Only a saga runtime's reconciler moves such a saga on.
   *
   * Read without the saga's definition, so some waits the reconciler would fail are not told:
   * one timed only by its own `timeoutMs` whose job was deleted (nothing in the database says
   * it had a timeout), and one after the pivot (a sleep's lost wake job there looks like what
   * is left of a wait an operator retried, which waits on with no timeout job). A wait for a
   * signal only, with no deadline, has no timeout job and is never stranded.
   */
  stranded: StrandedJob | null;
}

/** The job a stranded saga is on (see `SagaView.stranded`). */
export interface StrandedJob {
  /**
   * Which of the saga's jobs: `step` or `compensation`, the job of the step or compensation a
   * `running` or `compensating` saga is on; `timeout`, the job that was to end a `waiting`
   * saga's wait (a wait's timeout job, a sleep's wake job).
   */
  kind: 'step' | 'compensation' | 'timeout';
  /**
   * The job's id; null for a `timeout` job that no longer exists (a saga does not record its
   * timeout job's id: it is looked up by `key`).
   */
  jobId: string | null;
  /**
   * The job's idempotency key: `saga:<id>:<step>`, `saga:<id>:compensate:<step>` or
   * `saga:<id>:timeout:<step>` (the saga id percent-encoded where it holds `%`, `:` or other
   * characters than printable ASCII).
   */
  key: string;
  /** `missing`: the job no longer exists (deleted by hand, or pruned by retention). */
  status: 'dead' | 'cancelled' | 'missing';
  /** The job's last error (why it went dead), if it recorded one. */
  lastError: string | null;
}

export interface SagaListOptions {
  status?: SagaStatus | readonly SagaStatus[] | undefined;
  name?: string | undefined;
  /** Only sagas of this definition version. */
  version?: number | undefined;
  /** Page size, 1-1000 (default 50). */
  limit?: number | undefined;
  /** `nextCursor` of the previous page. */
  cursor?: string | undefined;
  /**
   * Most sagas looked at for one page (default 20,000, at least `limit`), newest first along one
   * index: the name index with `name`, the status index with one status, else the creation
   * index. A filter that matches few of them gives a short (even empty) page with `complete:
   * false` and a `nextCursor` that searches older; the read costs the same on millions of sagas.
   */
  scanLimit?: number | undefined;
  /**
   * Also each saga's step history (statuses, attempts, times, errors; outputs too), read for the
   * whole page in one more statement instead of one `getSaga` per saga.
   */
  history?: boolean | undefined;
}

export interface SagaList {
  sagas: SagaSummary[];
  /** Pass it as `cursor` for the next page (or to search older); null on the last page. */
  nextCursor: string | null;
  /**
   * False when the page stopped at `scanLimit` sagas looked at rather than at `limit` matches or
   * the oldest saga: it may be short or empty, and older sagas may still match (`nextCursor`).
   */
  complete?: boolean;
}

const date = (value: Date | string | null) => (value === null ? null : new Date(value));

function toSummary(row: SagaReadRow): SagaSummary {
  return {
    id: row.id,
    name: row.name,
    version: row.version,
    status: row.status,
    currentStep: row.current_step,
    currentKind: row.current_kind,
    currentJobId: row.current_job_id,
    pivoted: row.pivoted,
    cancelRequested: row.cancel_requested,
    deadline: date(row.deadline),
    error: row.error,
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
    finishedAt: date(row.finished_at),
    lockKey: row.lock_key,
    parent:
      row.parent_id !== null && row.parent_step !== null
        ? { id: row.parent_id, step: row.parent_step }
        : null,
  };
}

function toStepRecord(h: HistoryRow, job: JobState | undefined): StepRecord {
  // Nothing is written when an attempt starts (see `loadAttempt`): an attempt in progress shows
  // on the job row, with its attempt number and claim time. A finished step keeps what its end
  // wrote.
  const live = job !== undefined && (h.status === 'pending' || h.status === 'running');
  const running = live && (job.status === 'processing' || job.status === 'retryable');
  return {
    step: h.step,
    kind: h.kind,
    status: running ? 'running' : h.status,
    attempts: running ? Math.max(h.attempts, job.attempts) : h.attempts,
    jobId: h.job_id,
    output: h.output,
    error: h.error,
    createdAt: new Date(h.created_at),
    startedAt: date(h.started_at) ?? (running ? job.lockedAt : null),
    finishedAt: date(h.finished_at),
  };
}

/**
 * The history rows with the step the saga is on: its row is written when it ends (or waits, or an
 * attempt fails), so until then it is shown from the saga's pointer, as reached and `pending`
 * (its job, read next, may show it running).
 */
function withCurrent<R extends HistoryRow>(
  saga: SagaReadRow,
  rows: readonly R[],
  extra: Omit<R, keyof HistoryRow>,
): R[] {
  const step = saga.current_step;
  const kind = saga.current_kind;
  if (step === null || kind === null || rows.some((r) => r.step === step && r.kind === kind)) {
    return [...rows];
  }
  const current: HistoryRow = {
    step,
    kind,
    status: 'pending',
    attempts: 0,
    job_id: saga.current_job_id,
    output: null,
    error: null,
    created_at: saga.current_since ?? saga.updated_at,
    started_at: null,
    finished_at: null,
  };
  return [...rows, { ...current, ...extra } as R];
}

/**
 * The history rows, with the jobs behind those still in progress read in one more statement (none
 * when every step has ended).
 */
async function toStepRecords(tx: Queryable, rows: readonly HistoryRow[]): Promise<StepRecord[]> {
  const ids = rows
    .filter((r) => r.job_id !== null && (r.status === 'pending' || r.status === 'running'))
    .map((r) => r.job_id!);
  const jobs = await jobStates(tx, [...new Set(ids)]);
  return rows.map((r) => toStepRecord(r, r.job_id === null ? undefined : jobs.get(r.job_id)));
}

/**
 * One saga with its history, signals and children, read on one snapshot: read statement by
 * statement, a step that ended between two of them showed the saga on a step its history had
 * already finished.
 */
export function readSaga(pool: pg.Pool, id: string): Promise<SagaView | null> {
  return withSnapshot(pool, async (tx) => {
    const row = (await runSql<SagaReadRow>(tx, selectSaga(id))).rows[0];
    if (!row) return null;
    const history = await runSql<HistoryRow>(tx, selectHistory(id));
    const signals = await runSql<SignalRow>(tx, selectSignals(id));
    const children = await runSql<ChildRow>(tx, selectChildren(id));
    return {
      ...toSummary(row),
      input: row.input,
      history: await toStepRecords(tx, withCurrent(row, history.rows, {})),
      signals: signals.rows.map((s) => ({
        name: s.name,
        payload: s.payload,
        receivedAt: new Date(s.received_at),
        consumedAt: date(s.consumed_at),
      })),
      children: children.rows.map((c) => ({
        id: c.id,
        name: c.name,
        step: c.parent_step,
        status: c.status,
      })),
      stranded: await readStranded(tx, row, children.rows),
    };
  });
}

/**
 * The job a live saga is on, when it can no longer move the saga: the reconciler's own test (see
 * `createReconciler`), read on the saga's snapshot. A job that dies runs its saga's hook in the
 * transaction that kills it, so a dead job seen on the same snapshot as a saga still on it was
 * killed where no hook ran.
 */
async function readStranded(
  tx: Queryable,
  row: SagaReadRow,
  children: readonly ChildRow[],
): Promise<StrandedJob | null> {
  if (row.status === 'waiting') return readStrandedWait(tx, row, children);
  const jobId = row.current_job_id;
  const step = row.current_step;
  if (
    jobId === null ||
    step === null ||
    (row.status !== 'running' && row.status !== 'compensating')
  ) {
    return null;
  }
  const kind = row.current_kind === 'compensation' ? 'compensation' : 'step';
  const key = kind === 'step' ? stepKey(row.id, step) : compensationKey(row.id, step);
  const job = (await jobStates(tx, [jobId])).get(jobId);
  if (!job) return { kind, jobId, key, status: 'missing', lastError: null };
  if (job.status !== 'dead' && job.status !== 'cancelled') return null;
  // A run an operator stopped whose handler may still be at work: the reconciler waits for it
  // (see `createReconciler`), so it is not stranded yet. Before, `sagas show` and the dashboard
  // called it stranded and sent the operator to a reconcile pass that did nothing.
  if (job.stopping) return null;
  return { kind, jobId, key, status: job.status, lastError: job.lastError };
}

/**
 * The timeout or wake job of a waiting saga's step, when it can no longer end the wait: the test
 * of the reconciler's `reconcileWaiting` as far as the database tells it without the saga's
 * definition. The saga does not record the job (its pointer stays on the step's own job, which
 * parked it) and only the definition names its queue, so it is looked up by its key in every
 * queue (the queue's `findJobsByKey`). Its hook, like a step job's, runs in the transaction that
 * kills it and fails the wait, so one found dead on this snapshot died where no hook ran.
 */
async function readStrandedWait(
  tx: Queryable,
  row: SagaReadRow,
  children: readonly ChildRow[],
): Promise<StrandedJob | null> {
  const step = row.current_step;
  // After the pivot an ended job under the key may be what is left of a wait an operator
  // retried, which waits on with no timeout job, and the reconciler leaves a wait there alone;
  // only a sleep's lost wake job it ends early, and without the definition the two look alike.
  if (step === null || row.pivoted) return null;
  const key = timeoutKey(row.id, step);
  // Newest first; one in any queue that can still run (or ran) leaves the wait to it.
  const ids = await findJobsByKey(tx, key);
  const states = await jobStates(tx, ids);
  const jobs = ids.flatMap((id) => {
    const job = states.get(id);
    return job ? [{ id, ...job }] : [];
  });
  if (jobs.some((j) => j.status !== 'dead' && j.status !== 'cancelled')) return null;
  const ended = jobs[0];
  if (ended && (ended.status === 'dead' || ended.status === 'cancelled')) {
    return {
      kind: 'timeout',
      jobId: ended.id,
      key,
      status: ended.status,
      lastError: ended.lastError,
    };
  }
  // None at all: a wait is timed, so had a job, when the saga has a deadline (before its pivot
  // every wait's job is due by then), unless the step waits on child sagas, which take the
  // deadline themselves and no timeout job. A wait timed by its own `timeoutMs` alone cannot be
  // told from a wait for a signal only, which has no job.
  if (row.deadline === null || children.some((c) => c.parent_step === step)) return null;
  return { kind: 'timeout', jobId: null, key, status: 'missing', lastError: null };
}

/**
 * The form of `created_at::text` as PostgreSQL writes it (DateStyle ISO, which node-postgres needs
 * to read times at all): the date, the time to the second, up to 6 fraction digits, the session
 * zone's numeric offset (seconds in it for some historical zones), " BC" before year 1; or
 * infinity/-infinity. Only the form: whether it is a real time within PostgreSQL's range,
 * PostgreSQL judges (`checkCursorTime`).
 */
const CURSOR_TIME =
  /^(?:-?infinity|\d{4,}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?[+-]\d\d(?::\d\d){0,2}(?: BC)?)$/;

/**
 * A cursor is the base64url of the JSON pair [created_at::text, id] of a page's last saga (see
 * `encodeCursor`). Its structure, the form of its time and its id are checked here, before any
 * statement; the time's value is PostgreSQL's to judge (`checkCursorTime`).
 */
function decodeCursor(cursor: unknown): { createdKey: string; id: string } {
  if (typeof cursor !== 'string') {
    throw invalidCursor(String(cursor), `it is a ${typeof cursor}, not a string`);
  }
  if (!/^[A-Za-z0-9_-]+$/.test(cursor)) {
    throw invalidCursor(cursor, 'it is not base64url (letters, digits, - and _)');
  }
  const bytes = Buffer.from(cursor, 'base64url');
  if (bytes.toString('base64url') !== cursor) {
    throw invalidCursor(cursor, 'it is not base64url (letters, digits, - and _)');
  }
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    throw invalidCursor(cursor, 'it does not decode to UTF-8 JSON');
  }
  if (!Array.isArray(value) || value.length !== 2) {
    throw invalidCursor(cursor, 'it does not decode to a [time, id] pair');
  }
  const [createdKey, id] = value as unknown[];
  if (typeof createdKey !== 'string') {
    throw invalidCursor(cursor, `its time is a ${typeName(createdKey)}, not a string`);
  }
  if (!CURSOR_TIME.test(createdKey)) {
    throw invalidCursor(
      cursor,
      `time ${JSON.stringify(createdKey)} is not of the form YYYY-MM-DD HH:MM:SS[.ffffff]+HH[:MM[:SS]]`,
    );
  }
  if (typeof id !== 'string') {
    throw invalidCursor(cursor, `its saga id is a ${typeName(id)}, not a string`);
  }
  // The saga id rule (see the runtime's `checkSagaId`), which every saga's id met: no NUL among
  // the control characters, which PostgreSQL text cannot hold.
  const chars = [...id].length;
  if (chars < 1 || chars > MAX_SAGA_ID_CHARS || SAGA_ID_UNFIT.test(id)) {
    const shown =
      chars > 40 ? `${JSON.stringify([...id].slice(0, 40).join(''))}...` : JSON.stringify(id);
    throw invalidCursor(
      cursor,
      `its saga id ${shown} is not 1-${MAX_SAGA_ID_CHARS} characters without whitespace or control characters`,
    );
  }
  return { createdKey, id };
}

/**
 * PostgreSQL reads the cursor's time as a timestamptz, as the page's statements will, in a
 * statement of its own: a data error (class 22) of this one statement is the cursor's, refused as
 * invalid_cursor with PostgreSQL's message; any other error goes to the caller as it is. Its
 * verdict depends on no session setting (the form has a numeric offset and the date in ISO
 * order), so without histories it may run on another of the pool's connections than the page.
 * The cost: one round trip more per paged read with a cursor, an operator's read, not a hot path.
 */
async function checkCursorTime(tx: Queryable, cursor: string, time: string): Promise<void> {
  try {
    await runSql(tx, castCursorTime(time));
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('22')) {
      throw invalidCursor(
        cursor,
        `PostgreSQL does not read its time ${JSON.stringify(time)} as a timestamptz (${(error as Error).message})`,
      );
    }
    throw error;
  }
}

const typeName = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

function invalidCursor(cursor: string, why: string): SagaError {
  const shown = cursor.length > 120 ? `${cursor.slice(0, 120)}...` : cursor;
  return new SagaError(
    'invalid_cursor',
    `cursor ${JSON.stringify(shown)} is not a listSagas cursor: ${why}`,
  );
}

export async function readSagas(pool: pg.Pool, options: SagaListOptions = {}): Promise<SagaList> {
  const limit = options.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1_000) {
    throw new SagaError('invalid_limit', `limit must be an integer from 1 to 1000, got ${limit}`);
  }
  const status: unknown = options.status;
  if (
    status !== undefined &&
    typeof status !== 'string' &&
    !(Array.isArray(status) && status.every((s) => typeof s === 'string'))
  ) {
    throw new SagaError('invalid_status', 'status must be a saga status or an array of them');
  }
  const given: readonly string[] =
    status === undefined ? [] : typeof status === 'string' ? [status] : status;
  if (
    options.version !== undefined &&
    (!Number.isInteger(options.version) || options.version < 1 || options.version > 2 ** 31 - 1)
  ) {
    throw new SagaError(
      'invalid_version',
      `version must be an integer from 1 to 2147483647, got ${options.version}`,
    );
  }
  if (
    options.name !== undefined &&
    (typeof options.name !== 'string' || options.name.includes('\0'))
  ) {
    throw new SagaError('invalid_name', 'name must be a string without NUL characters');
  }
  const scanLimit = options.scanLimit ?? SAGA_SCAN_LIMIT;
  if (!Number.isInteger(scanLimit) || scanLimit < 1 || scanLimit > 1_000_000) {
    throw new SagaError(
      'invalid_limit',
      `scanLimit must be an integer from 1 to 1000000, got ${scanLimit}`,
    );
  }
  const known: readonly string[] = sagaStatus.enumValues;
  const unknown = given.filter((s) => !known.includes(s));
  if (unknown.length > 0) {
    throw new SagaError(
      'invalid_status',
      `unknown saga status ${unknown.map((s) => JSON.stringify(s)).join(', ')}; use ${sagaStatus.enumValues.join(', ')}`,
    );
  }
  const filter = {
    statuses: given as readonly SagaStatus[],
    name: options.name,
    version: options.version,
    limit: limit + 1,
    after: options.cursor ? decodeCursor(options.cursor) : undefined,
    scanLimit: Math.max(scanLimit, limit + 1),
  };
  // With histories, the page and its histories are read on one snapshot (see readSaga), the
  // cursor's time checked first in it. An error of the page's statements is not the cursor's
  // (PostgreSQL has read its time) and goes to the caller as it is.
  const read = async (tx: Queryable, withHistory: boolean) => {
    if (filter.after) await checkCursorTime(tx, options.cursor!, filter.after.createdKey);
    return readPage(tx, filter, withHistory);
  };
  return options.history ? withSnapshot(pool, (tx) => read(tx, true)) : read(pool, false);
}

async function readPage(
  tx: Queryable,
  filter: SagaListFilter & { scanLimit: number },
  withHistory: boolean,
): Promise<SagaList> {
  const limit = filter.limit - 1;
  const { rows } = await runSql<SagaReadRow>(tx, selectSagas(filter));
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  let nextCursor = rows.length > limit && last ? encodeCursor(last.created_key, last.id) : null;
  let complete = true;
  if (nextCursor === null && sagaWindowFilters(filter)) {
    // A short page: the filter ran out of matches, or the window ran out of sagas to look at.
    const { rows: reach } = await runSql<{ scanned: number; created_key: string; id: string }>(
      tx,
      selectSagaReach(filter),
    );
    const end = reach[0];
    if (end && end.scanned >= filter.scanLimit) {
      nextCursor = encodeCursor(end.created_key, end.id);
      complete = false;
    }
  }
  const sagas = page.map(toSummary);
  if (withHistory && sagas.length > 0) {
    const { rows: found } = await runSql<HistoryRow & { saga_id: string }>(
      tx,
      selectHistories(sagas.map((s) => s.id)),
    );
    const rowsOf = new Map<string, (HistoryRow & { saga_id: string })[]>();
    for (const r of found) {
      const list = rowsOf.get(r.saga_id);
      if (list) list.push(r);
      else rowsOf.set(r.saga_id, [r]);
    }
    const steps = page.flatMap((saga) =>
      withCurrent(saga, rowsOf.get(saga.id) ?? [], { saga_id: saga.id }),
    );
    const records = await toStepRecords(tx, steps);
    const bySaga = new Map<string, StepRecord[]>(sagas.map((s) => [s.id, []]));
    steps.forEach((row, i) => bySaga.get(row.saga_id)?.push(records[i]!));
    for (const saga of sagas) saga.history = bySaga.get(saga.id)!;
  }
  return { sagas, nextCursor, complete };
}

function encodeCursor(createdKey: string, id: string): string {
  return Buffer.from(JSON.stringify([createdKey, id]), 'utf8').toString('base64url');
}

export interface SagaCounts {
  /** Sagas per status; a count above `cap` is shown as `cap + 1` and listed in `atLeast`. */
  counts: Record<SagaStatus, number>;
  atLeast: SagaStatus[];
  cap: number;
}

/**
 * How many sagas are in each status, each count read from the status index and stopped past
 * `cap` (default 10,000), so it costs the same on millions of sagas.
 */
export async function readSagaCounts(
  pool: pg.Pool,
  options: { cap?: number } = {},
): Promise<SagaCounts> {
  const cap = options.cap ?? 10_000;
  const { rows } = await runSql<{ status: SagaStatus; count: number }>(
    pool,
    countSagasByStatus(sagaStatus.enumValues, cap),
  );
  const counts = Object.fromEntries(sagaStatus.enumValues.map((s) => [s, 0])) as Record<
    SagaStatus,
    number
  >;
  for (const r of rows) counts[r.status] = r.count;
  return { counts, atLeast: rows.filter((r) => r.count > cap).map((r) => r.status), cap };
}

/** The names of the saga definitions that have sagas, in order (at most `max`, default 500). */
export async function readSagaNames(pool: pg.Pool, options: { max?: number } = {}) {
  const { rows } = await runSql<{ name: string }>(pool, selectSagaNames(options.max ?? 500));
  return rows.map((r) => r.name);
}
