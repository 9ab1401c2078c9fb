import { defineJob, type AnyJobDefinition, type WorkerOptions } from '@skiplock/queue';
import { UsageError } from './args.js';
import { importModule } from './import-module.js';

export interface LoadedJobs {
  jobs: AnyJobDefinition[];
  /** The module's `workerOptions` export, if any; command-line flags override it. */
  workerOptions: Partial<WorkerOptions>;
  /** Its saga runtimes (`createSagaRuntime` results), each with the name it is exported as. */
  sagaRuntimes: { runtime: SagaRuntimeLike; where: string }[];
}

/**
 * What the worker uses of a saga runtime: its reconciler, which moves on sagas whose job died
 * where no saga hook ran. Recognized by shape, not `instanceof`: the module may import another
 * copy of @skiplock/saga than the CLI's.
 */
export interface SagaRuntimeLike {
  jobs: readonly unknown[];
  reconciler: { start(): void; stop(): Promise<void>; runOnce(): Promise<unknown> };
}

function looksLikeSagaRuntime(value: unknown): value is SagaRuntimeLike {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  const r = v.reconciler as Record<string, unknown> | null | undefined;
  return (
    Array.isArray(v.jobs) &&
    typeof r === 'object' &&
    r !== null &&
    typeof r.start === 'function' &&
    typeof r.stop === 'function' &&
    typeof r.runOnce === 'function'
  );
}

/** The CLI owns these: the database, the logger, and the job list itself. */
const reservedOptions = ['jobs', 'pool', 'connectionString', 'logger'];

function looksLikeJob(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  // Any Standard Schema (zod 4 from any copy of zod, valibot, arktype): recognized by its shape.
  const payload = v.payload as { '~standard'?: unknown } | null | undefined;
  return (
    typeof v.type === 'string' &&
    typeof v.handler === 'function' &&
    (typeof payload === 'object' || typeof payload === 'function') &&
    payload !== null &&
    typeof payload['~standard'] === 'object' &&
    payload['~standard'] !== null
  );
}

/** A `defineJob` result is used as is; a bare `{ type, payload, handler }` gets its defaults. */
function normalize(value: Record<string, unknown>, where: string): AnyJobDefinition {
  if ('leaseMs' in value && 'queue' in value && 'backoff' in value) {
    return value as unknown as AnyJobDefinition;
  }
  try {
    return defineJob(value as unknown as Parameters<typeof defineJob>[0]);
  } catch (error) {
    throw new UsageError(`${where} is not a valid job definition: ${(error as Error).message}`);
  }
}

function fromArray(value: unknown, where: string): unknown[] {
  if (!Array.isArray(value)) return [];
  value.forEach((item, i) => {
    if (!looksLikeJob(item)) {
      throw new UsageError(
        `${where}[${i}] is not a job definition (an object with type, payload and handler)`,
      );
    }
  });
  return value;
}

/**
 * Imports a module (TypeScript or JavaScript) and collects its job definitions: a default export
 * array (or single definition), a `jobs` array, any other export shaped like a definition, and
 * the jobs of each saga runtime it exports.
 */
export async function loadJobModule(specifier: string, cwd: string): Promise<LoadedJobs> {
  const exports = await importModule(specifier, cwd);
  const found: { value: Record<string, unknown>; where: string }[] = [];
  const add = (value: unknown, where: string) => {
    if (looksLikeJob(value)) found.push({ value, where });
  };
  fromArray(exports.default, 'default export').forEach((v, i) => add(v, `default export[${i}]`));
  add(exports.default, 'default export');
  fromArray(exports.jobs, 'export "jobs"').forEach((v, i) => add(v, `export "jobs"[${i}]`));
  for (const [name, value] of Object.entries(exports)) {
    if (name !== 'default' && name !== 'jobs') add(value, `export "${name}"`);
  }
  // One runtime is often exported twice (by name and as the default); start its reconciler once.
  const sagaRuntimes = new Map<SagaRuntimeLike, string>();
  for (const [name, value] of Object.entries(exports)) {
    if (looksLikeSagaRuntime(value) && !sagaRuntimes.has(value)) {
      sagaRuntimes.set(value, name === 'default' ? 'default export' : `export "${name}"`);
    }
  }
  // A runtime's own job definitions run too: a module that exported the runtime but not
  // `runtime.jobs` was told it "exports no job definitions". The same objects exported as `jobs`
  // as well are kept once, below.
  for (const [runtime, where] of sagaRuntimes) {
    runtime.jobs.forEach((v, i) => add(v, `${where}.jobs[${i}]`));
  }
  // One definition is often exported twice (by name and in the list); keep it once.
  const seen = new Map<unknown, AnyJobDefinition>();
  const byType = new Map<string, string>();
  for (const { value, where } of found) {
    if (seen.has(value)) continue;
    const job = normalize(value, where);
    const earlier = byType.get(job.type);
    if (earlier) {
      throw new UsageError(`job type "${job.type}" is defined twice: ${earlier} and ${where}`);
    }
    byType.set(job.type, where);
    seen.set(value, job);
  }
  if (seen.size === 0) {
    throw new UsageError(
      `${specifier} exports no job definitions: export them as a default array, a "jobs" ` +
        'array, or one by one (each made with defineJob)',
    );
  }
  return {
    jobs: [...seen.values()],
    workerOptions: readWorkerOptions(exports.workerOptions),
    sagaRuntimes: [...sagaRuntimes].map(([runtime, where]) => ({ runtime, where })),
  };
}

function readWorkerOptions(value: unknown): Partial<WorkerOptions> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new UsageError('export "workerOptions" must be an object of createWorker options');
  }
  for (const key of reservedOptions) {
    if (key in value) {
      throw new UsageError(
        `export "workerOptions" must not set ${key}: the CLI provides it (see skiplock worker --help)`,
      );
    }
  }
  return value as Partial<WorkerOptions>;
}
