/** The first value in a payload that JSON or PostgreSQL's jsonb cannot hold as given. */
export interface JsonProblem {
  path: string;
  message: string;
}

const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const identifier = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
/**
 * Deepest nesting of arrays and objects accepted. Deeper, the walk below (and JSON.stringify)
 * ran out of stack and the caller got a bare RangeError (20,000 levels, found in review), where
 * a refused payload must name what is wrong.
 */
export const MAX_JSON_DEPTH = 1_000;

function textProblem(s: string): string | null {
  if (s.includes('\u0000'))
    return 'contains a NUL character (\\u0000), which PostgreSQL cannot store';
  if (loneSurrogate.test(s)) return 'contains a lone surrogate, which is not well-formed text';
  return null;
}

function child(path: string, key: string): string {
  return identifier.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** A schema issue found on the stored form (see `JsonNotes.converted`), saying so. */
export function asStored(issue: JsonProblem): JsonProblem {
  return {
    path: issue.path,
    message: `${issue.message} (checked as stored in JSON, where a Date becomes a string, and undefined null or, in an object, nothing)`,
  };
}

/** Filled in by `findJsonProblem` for a value it accepts. */
export interface JsonNotes {
  /**
   * JSON changed a value on its way: a `toJSON` method ran (a Date's, say), or an undefined,
   * function or symbol was dropped from an object or nulled in an array. The stored payload is
   * not what the producer's schema saw, so it must be validated again as stored.
   */
  converted: boolean;
}

/**
 * Walks `value` once, as `JSON.stringify` would, and returns the first value that would throw
 * (BigInt, a cycle), be stored as something else (NaN and ±Infinity become null) or be refused by
 * PostgreSQL (NUL, lone surrogates), with its path from `root` (`payload.items[2].name`).
 */
export function findJsonProblem(
  value: unknown,
  root = 'payload',
  notes?: JsonNotes,
): JsonProblem | null {
  const seen = new Set<object>();
  function walk(v: unknown, path: string, depth: number): JsonProblem | null {
    if (
      v !== null &&
      typeof v === 'object' &&
      typeof (v as { toJSON?: unknown }).toJSON === 'function'
    ) {
      v = (v as { toJSON: (key: string) => unknown }).toJSON('');
      if (notes) notes.converted = true;
    }
    switch (typeof v) {
      case 'bigint':
        return { path, message: 'is a BigInt, which JSON cannot hold; send a string or a number' };
      case 'number':
        return Number.isFinite(v) ? null : { path, message: `is ${v}, which JSON stores as null` };
      case 'string': {
        const problem = textProblem(v);
        return problem ? { path, message: problem } : null;
      }
      case 'object': {
        if (v === null) return null;
        if (seen.has(v)) return { path, message: 'is a circular reference' };
        if (v instanceof Map || v instanceof Set) {
          const kind = v instanceof Map ? 'a Map' : 'a Set';
          return { path, message: `is ${kind}, which JSON stores as {}; send an object or array` };
        }
        if (depth >= MAX_JSON_DEPTH) {
          return { path, message: `nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels` };
        }
        seen.add(v);
        if (Array.isArray(v)) {
          for (let i = 0; i < v.length; i++) {
            const p = walk(v[i], `${path}[${i}]`, depth + 1);
            if (p) return p;
          }
        } else {
          for (const key of Object.keys(v)) {
            const p0 = child(path, key);
            const keyProblem = textProblem(key);
            if (keyProblem) return { path: p0, message: `has a key that ${keyProblem}` };
            const p = walk((v as Record<string, unknown>)[key], p0, depth + 1);
            if (p) return p;
          }
        }
        seen.delete(v);
        return null;
      }
      default:
        // undefined, a function or a symbol: JSON drops it from an object and nulls it in an
        // array, so the stored payload differs from the one validated.
        if (notes) notes.converted = true;
        return null;
    }
  }
  // Inside objects and arrays JSON drops or nulls these; as the whole value there is no JSON at
  // all (found by the property test: a function payload failed with a raw TypeError).
  const whole =
    value !== null &&
    typeof value === 'object' &&
    typeof (value as { toJSON?: unknown }).toJSON === 'function'
      ? (value as { toJSON: (key: string) => unknown }).toJSON('')
      : value;
  if (whole === undefined || typeof whole === 'function' || typeof whole === 'symbol') {
    return {
      path: root,
      message: `is ${whole === undefined ? 'undefined' : `a ${typeof whole}`}, which JSON cannot hold`,
    };
  }
  return walk(value, root, 0);
}
