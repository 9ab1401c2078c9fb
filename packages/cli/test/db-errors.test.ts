import { describe, expect, it } from 'vitest';
import { describeDatabaseError, describeTarget } from '../src/db-errors.js';

const url = 'postgres://ada:s3cret@db.internal:6543/billing';
const pgError = (code: string, message = 'x') => Object.assign(new Error(message), { code });

describe('database error messages', () => {
  it('names host:port, user and database, never the password', () => {
    expect(describeTarget(url)).toEqual({
      address: 'db.internal:6543',
      user: 'ada',
      database: 'billing',
    });
    expect(describeTarget('postgres://localhost/x').address).toBe('localhost:5432');
  });

  it('explains network failures, including the AggregateError of a multi-address host', () => {
    const aggregate = Object.assign(new AggregateError([pgError('ECONNREFUSED')], ''), {});
    expect(describeDatabaseError(aggregate, url)).toBe(
      'cannot use PostgreSQL at db.internal:6543: connection refused (is PostgreSQL running there?)',
    );
    expect(describeDatabaseError(pgError('ENOTFOUND'), url)).toContain('host not found');
    expect(describeDatabaseError(new Error('timeout expired'), url)).toContain(
      'connection timed out',
    );
    expect(
      describeDatabaseError(new Error('Connection terminated due to connection timeout'), url),
    ).toContain('connection timed out');
  });

  it('explains server refusals', () => {
    const auth = describeDatabaseError(pgError('28P01'), url)!;
    expect(auth).toBe(
      'cannot use PostgreSQL at db.internal:6543: password authentication failed for user "ada"',
    );
    expect(auth).not.toContain('s3cret');
    expect(describeDatabaseError(pgError('3D000'), url)).toContain(
      'database "billing" does not exist',
    );
    expect(describeDatabaseError(pgError('57P03'), url)).toContain('starting up');
  });

  it('leaves errors that are not about the connection alone', () => {
    expect(describeDatabaseError(pgError('23505', 'duplicate key'), url)).toBeNull();
    expect(describeDatabaseError(new Error('boom'), url)).toBeNull();
  });
});
