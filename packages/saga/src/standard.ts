import type { StandardSchemaV1 } from '@standard-schema/spec';
import { NonRetryableError } from '@skiplock/queue';
import { asStored, findJsonProblem, loggedAs } from '@skiplock/queue/engine';
import type { FieldIssue } from './errors.js';

/**
 * Why `value` is not a Standard Schema v1 validator (https://standardschema.dev), or null when it
 * is one. Checked by shape, never by `instanceof`, so a schema from the application's own copy of
 * zod, or from valibot or arktype, is accepted. (The queue checks job payloads the same way.)
 */
export function standardSchemaProblem(value: unknown): string | null {
  // arktype's types are functions, so both objects and functions may carry `~standard`.
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) {
    return `got ${value === null ? 'null' : typeof value}`;
  }
  const props = (value as { '~standard'?: unknown })['~standard'];
  if (typeof props !== 'object' || props === null) return 'it has no `~standard` property';
  const { version, validate } = props as { version?: unknown; validate?: unknown };
  if (version !== 1) return `its \`~standard.version\` is ${String(version)}, not 1`;
  if (typeof validate !== 'function') return 'its `~standard.validate` is not a function';
  return null;
}

/** What `standardSchemaProblem` found, as the end of a definition error. */
export function notAStandardSchema(option: string, problem: string): string {
  return (
    `${option} must be a Standard Schema v1 validator (a zod 4, valibot or arktype schema, or ` +
    `any object with a \`~standard\` property): ${problem}`
  );
}

/** Validates `value`; awaits the schema's validation, which may be synchronous or not. */
export async function validate<S extends StandardSchemaV1>(
  schema: S,
  value: unknown,
): Promise<StandardSchemaV1.Result<StandardSchemaV1.InferOutput<S>>> {
  return (await schema['~standard'].validate(value)) as StandardSchemaV1.Result<
    StandardSchemaV1.InferOutput<S>
  >;
}

/** Each issue with its path spelled out from `prefix`: `input.items.0.sku`, or `input` at the root. */
export function issuesAt(prefix: string, issues: readonly StandardSchemaV1.Issue[]): FieldIssue[] {
  return issues.map((issue) => ({
    path: [prefix, ...(issue.path ?? []).map(pathKey)].join('.'),
    message: issue.message,
  }));
}

function pathKey(segment: PropertyKey | StandardSchemaV1.PathSegment): string {
  return String(typeof segment === 'object' && segment !== null ? segment.key : segment);
}

/**
 * What is wrong with `value` as stored JSON, or null: what JSON or jsonb cannot hold as given
 * (named by `findJsonProblem`), or, when a `toJSON` (a Date's, say) changed it on the way, the
 * schema's issues with the stored form, which is what every step will parse.
 */
export async function storedJsonIssues(
  schema: StandardSchemaV1,
  value: unknown,
  root: string,
): Promise<FieldIssue[] | null> {
  // A value of undefined is stored as null: checked again as such, or a schema that takes
  // undefined but not null (an optional input, a payload-less signal) accepts what every step
  // will then refuse.
  const notes = { converted: value === undefined };
  const problem = findJsonProblem(value ?? null, root, notes);
  if (problem) return [problem];
  if (!notes.converted) return null;
  const again = await validate(schema, JSON.parse(JSON.stringify(value ?? null)));
  if (!again.issues) return null;
  return issuesAt(root, again.issues).map(asStored);
}

/**
 * A non-retryable error naming each issue with its message, logged with the paths only: a
 * validator's messages may quote the value (valibot's do), and payloads are never logged.
 */
export function invalidInput(what: string, issues: readonly FieldIssue[]): NonRetryableError {
  return loggedAs(
    new NonRetryableError(`${what}: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`),
    `${what} at ${[...new Set(issues.map((i) => i.path))].join(', ')}`,
  );
}
