import type { StandardSchemaV1 } from '@standard-schema/spec';
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
