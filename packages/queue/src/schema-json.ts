import type { JsonProblem } from './json-safe.js';

/**
 * Payloads are stored as JSON and parsed again by the worker, so a schema that accepts only
 * values JSON cannot carry (a `Date`, a `bigint`, a `Map`...) accepts the producer's value and
 * then refuses the stored one: every such job would go dead. zod 4 lets us see this when the job
 * type or saga is defined; other validators are caught at enqueue instead (see `findJsonProblem`'s
 * `converted` and the re-validation in the client).
 */
const unjsonable: Record<string, string> = {
  date: 'a Date, which JSON stores as a string; use z.coerce.date(), z.iso.datetime() or a codec',
  bigint: 'a BigInt, which JSON cannot hold; use z.coerce.bigint() or a string',
  map: 'a Map, which JSON stores as {}; use z.record()',
  set: 'a Set, which JSON stores as {}; use z.array()',
  symbol: 'a symbol, which JSON cannot hold',
  nan: 'NaN, which JSON stores as null',
  promise: 'a Promise, which JSON cannot hold',
  function: 'a function, which JSON cannot hold',
  file: 'a File, which JSON cannot hold',
};

interface ZodDef {
  type: string;
  coerce?: boolean;
  shape?: Record<string, unknown>;
  catchall?: unknown;
  element?: unknown;
  innerType?: unknown;
  options?: unknown[];
  items?: unknown[];
  rest?: unknown;
  valueType?: unknown;
  in?: unknown;
  left?: unknown;
  right?: unknown;
  values?: unknown[];
  getter?: () => unknown;
}

function defOf(schema: unknown): ZodDef | null {
  const def = (schema as { _zod?: { def?: ZodDef } } | null)?._zod?.def;
  return def && typeof def.type === 'string' ? def : null;
}

/**
 * The first place in a zod 4 schema whose accepted input cannot survive a JSON round trip, with
 * its path from `root`, or null (also for any schema that is not zod 4: nothing to see).
 * Only the input side matters (what the producer passes is what is stored): a pipe or codec is
 * checked on its `in` side, so `z.iso.datetime().pipe(z.coerce.date())` and codecs pass. A union
 * is refused only when none of its options can carry the value, and an optional, nullable or
 * defaulted one not at all.
 */
export function findSchemaJsonProblem(schema: unknown, root: string): JsonProblem | null {
  const seen = new Set<unknown>();
  function walk(node: unknown, path: string): JsonProblem | null {
    const def = defOf(node);
    if (!def || seen.has(node)) return null;
    seen.add(node);
    try {
      const why = unjsonable[def.type];
      if (why && !def.coerce) return { path, message: `the schema accepts only ${why}` };
      switch (def.type) {
        case 'literal':
          return def.values?.some((v) => typeof v === 'bigint')
            ? { path, message: `the schema accepts only ${unjsonable.bigint}` }
            : null;
        case 'object': {
          for (const [key, value] of Object.entries(def.shape ?? {})) {
            const p = walk(value, `${path}.${key}`);
            if (p) return p;
          }
          return def.catchall ? walk(def.catchall, `${path}.*`) : null;
        }
        case 'array':
          return walk(def.element, `${path}[]`);
        case 'record':
          return walk(def.valueType, `${path}.*`);
        case 'tuple': {
          const items = def.items ?? [];
          for (let i = 0; i < items.length; i++) {
            const p = walk(items[i], `${path}[${i}]`);
            if (p) return p;
          }
          return def.rest ? walk(def.rest, `${path}[]`) : null;
        }
        case 'union': {
          const found = (def.options ?? []).map((o) => walk(o, path));
          return found.length > 0 && found.every(Boolean) ? found[0]! : null;
        }
        case 'intersection':
          return walk(def.left, path) ?? walk(def.right, path);
        case 'pipe':
          return walk(def.in, path);
        case 'lazy':
          return def.getter ? walk(def.getter(), path) : null;
        case 'optional':
        case 'nullable':
        case 'default':
        case 'prefault':
        case 'catch':
          // These accept a value JSON carries (absent, null, or anything), so a definition that
          // worked with producers leaving the field out keeps working; a Date given for it is
          // caught at enqueue by the stored-form check instead.
          return null;
        default:
          // readonly, nonoptional...: the inner type decides.
          return def.innerType ? walk(def.innerType, path) : null;
      }
    } finally {
      seen.delete(node);
    }
  }
  return walk(schema, root);
}
