import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { PayloadIssue } from './errors.js';

/**
 * Why `value` is not a Standard Schema v1 validator (https://standardschema.dev), or null when it
 * is one. Checked by shape, never by `instanceof`, so a schema from the application's own copy of
 * zod, or from valibot or arktype, is accepted.
 */
export function standardSchemaProblem(value: unknown): string | null {
  // arktype's types are functions, so both objects and functions may carry `~standard`.
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) {
    return `got ${value === null ? 'null' : typeof value}`;
  }
  const props = (value as { '~standard'?: unknown })['~standard'];
  if (typeof props !== 'object' || props === null) {
    return 'it has no `~standard` property';
  }
  const { version, validate } = props as { version?: unknown; validate?: unknown };
  if (version !== 1) return `its \`~standard.version\` is ${String(version)}, not 1`;
  if (typeof validate !== 'function') return 'its `~standard.validate` is not a function';
  return null;
}

/** Runs a schema's validation; its result may be a Promise (a schema with async checks). */
export function runValidation<S extends StandardSchemaV1>(
  schema: S,
  value: unknown,
):
  | StandardSchemaV1.Result<StandardSchemaV1.InferOutput<S>>
  | Promise<StandardSchemaV1.Result<StandardSchemaV1.InferOutput<S>>> {
  return schema['~standard'].validate(value) as
    | StandardSchemaV1.Result<StandardSchemaV1.InferOutput<S>>
    | Promise<StandardSchemaV1.Result<StandardSchemaV1.InferOutput<S>>>;
}

/** Each issue with its path spelled out from `prefix`: `payload.items.0.sku`, or `payload` at the root. */
export function issuesAt(
  prefix: string,
  issues: readonly StandardSchemaV1.Issue[],
): PayloadIssue[] {
  return issues.map((issue) => ({
    path: [prefix, ...(issue.path ?? []).map(pathKey)].join('.'),
    message: issue.message,
  }));
}

function pathKey(segment: PropertyKey | StandardSchemaV1.PathSegment): string {
  return String(typeof segment === 'object' && segment !== null ? segment.key : segment);
}

export function isThenable<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
