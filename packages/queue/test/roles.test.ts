import { describe, expect, it } from 'vitest';
import { grantsOnTable, queueGrants, roleIdentifiers } from '../src/engine.js';

const roles = { owner: 'app_owner', worker: 'app_worker', producer: 'app_producer' };

describe('least-privilege grants (queueGrants, @skiplock/queue/engine)', () => {
  it('quotes simple identifiers and refuses anything else before building SQL', () => {
    expect(roleIdentifiers(roles)).toEqual({
      owner: '"app_owner"',
      worker: '"app_worker"',
      producer: '"app_producer"',
    });
    for (const bad of ['', 'Owner', 'a b', 'x"y', "o'; DROP ROLE x; --", '9a', 'pg_x', 'public']) {
      expect(() => queueGrants({ ...roles, worker: bad }), bad).toThrow(/worker role/);
    }
    expect(() => queueGrants({ ...roles, worker: 'w'.repeat(64) })).toThrow(/at most 63/);
    expect(() => queueGrants({ ...roles, producer: roles.worker })).toThrow(/three different/);
    expect(() => grantsOnTable('jobs; --', [])).toThrow(/bad table name/);
  });

  it('gives the producer INSERT and SELECT on jobs, never UPDATE, DELETE or TRUNCATE', () => {
    const sql = queueGrants(roles).join(';\n');
    expect(sql).toContain('CREATE SCHEMA IF NOT EXISTS skiplock AUTHORIZATION "app_owner"');
    expect(sql).toContain('GRANT SELECT, INSERT ON skiplock.jobs TO "app_producer"');
    expect(sql).toContain('GRANT USAGE ON SEQUENCE skiplock.jobs_id_seq TO "app_producer"');
    expect(sql).toContain('REVOKE UPDATE, DELETE, TRUNCATE ON skiplock.jobs FROM "app_producer"');
    const producerGrants = sql
      .split('\n')
      .filter((line) => /\bGRANT\b/.test(line) && line.includes('"app_producer"'));
    for (const line of producerGrants) expect(line).not.toMatch(/UPDATE|DELETE|TRUNCATE|CREATE/);
    // The worker gets DML on future tables by default privileges, never CREATE on the schema.
    expect(sql).toMatch(/ALTER DEFAULT PRIVILEGES FOR ROLE "app_owner" IN SCHEMA skiplock/);
    expect(sql).not.toMatch(/GRANT[^;]*CREATE[^;]*TO "app_worker"/);
  });
});
