import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { statementName } from '../src/statement-name.js';

/** The name as computed from scratch: what a kept hash must always give back. */
const expected = (prefix: string, text: string) =>
  `${prefix}_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;

describe('statementName', () => {
  it('names a text by its hash, the same each time, with the prefix asked for', () => {
    const text = 'SELECT $1::int AS statement_name_test';
    expect(statementName('skiplock_a', text)).toBe(expected('skiplock_a', text));
    expect(statementName('skiplock_a', text)).toBe(expected('skiplock_a', text));
    // A kept hash serves another prefix too: the prefix is not part of what is kept.
    expect(statementName('skiplock_b', text)).toBe(expected('skiplock_b', text));
    expect(statementName('skiplock_a', `${text} `)).toBe(expected('skiplock_a', `${text} `));
    expect(statementName('skiplock_a', `${text} `)).not.toBe(statementName('skiplock_a', text));
  });

  it('names texts past the number it keeps, and keeps naming the first ones alike', () => {
    const texts = Array.from({ length: 1_500 }, (_, i) => `SELECT ${i} AS many_${i}`);
    for (const text of texts) expect(statementName('p', text)).toBe(expected('p', text));
    // Again, now that some are kept and the rest are not.
    for (const text of texts) expect(statementName('p', text)).toBe(expected('p', text));
  });
});
