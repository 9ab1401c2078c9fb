import { z } from 'zod';
import { ConfigError } from './errors.js';

/** Parses options with a zod schema and throws a ConfigError naming every bad field. */
export function parseConfig<S extends z.ZodType>(
  what: string,
  schema: S,
  value: unknown,
): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const details = result.error.issues
    .map((issue) => `${issue.path.length ? issue.path.join('.') : '(root)'}: ${issue.message}`)
    .join('; ');
  throw new ConfigError(`invalid ${what}: ${details}`);
}

/** The longest queue name or job type (the saga package checks the types it composes). */
export const MAX_NAME_LENGTH = 128;

export const queueName = z
  .string()
  .min(1)
  .max(MAX_NAME_LENGTH)
  .regex(/^[A-Za-z0-9_.:-]+$/, 'use letters, digits, _ . : -');

export const backoffSchema = z
  .object({
    baseMs: z.number().int().min(0).max(86_400_000),
    factor: z.number().min(1).max(10),
    maxMs: z
      .number()
      .int()
      .min(0)
      .max(7 * 86_400_000),
    jitter: z.number().min(0).max(1),
  })
  .partial()
  .strict();

/** A job's longest lease, in its options and in `ctx.extendLease`: a day. */
export const MAX_LEASE_MS = 86_400_000;

/** The longest throttle window: a year. */
export const MAX_WINDOW_MS = 365 * 86_400_000;

export const jobOptionsSchema = z
  .object({
    queue: queueName.optional(),
    priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
    maxAttempts: z.number().int().min(1).max(1_000).optional(),
    backoff: backoffSchema.optional(),
    timeoutMs: z.number().int().min(1).max(86_400_000).nullable().optional(),
    leaseMs: z.number().int().min(1_000).max(MAX_LEASE_MS).optional(),
    concurrencyLimit: z.number().int().min(1).max(10_000).optional(),
    singletonMode: z.enum(['keep', 'replace', 'throttle']).optional(),
    singletonWindowMs: z.number().int().min(1).max(MAX_WINDOW_MS).nullable().optional(),
    singletonRunning: z.boolean().optional(),
    trace: z.enum(['link', 'continue']).optional(),
    rateLimit: z
      .object({
        limit: z.number().int().min(1).max(100_000),
        intervalMs: z.number().int().min(1).max(86_400_000),
      })
      .passthrough()
      .nullable()
      .optional(),
  })
  .passthrough();

/** A concurrency key: travels in NOTIFY payloads (8,000 bytes at most), so it is kept short. */
export const concurrencyKeySchema = z
  .string()
  .min(1)
  .max(200)
  .refine((s) => !s.includes('\u0000'), 'must not contain NUL characters');

/** Default size limit for one serialized payload; large blobs belong in object storage. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024;
/** Default visibility timeout of a claim; heartbeats renew it well before it expires. */
export const DEFAULT_LEASE_MS = 30_000;

/** Refuses option names nobody reads, so a typo such as `concurency` is an error, not a default. */
export function rejectUnknownKeys(what: string, value: object, known: readonly string[]): void {
  const unknown = Object.keys(value).filter((key) => !known.includes(key));
  if (unknown.length > 0) {
    throw new ConfigError(
      `invalid ${what}: unknown option${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `"${k}"`).join(', ')}`,
    );
  }
}
