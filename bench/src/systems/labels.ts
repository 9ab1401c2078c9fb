/** How each system and configuration is named in the results. */
export const systemLabels: Record<string, string> = {
  skiplock: 'skiplock (defaults)',
  'skiplock-poll': 'skiplock (listen: false, 1 s poll)',
  'skiplock-sync': 'skiplock (asyncCommit: false, every commit waits for WAL)',
  'skiplock-unprepared': 'skiplock (preparedStatements: false)',
  'skiplock-untraced': 'skiplock (tracing: false)',
  'skiplock-otel': 'skiplock (OpenTelemetry SDK recording every span)',
  bare: 'bare SQL (seed claim, batch 100)',
  graphile: 'graphile-worker (defaults)',
  'graphile-lq': 'graphile-worker (localQueue 500, batched completion)',
  pgboss: 'pg-boss (batch 100, poll 0.5 s)',
  'skiplock-keyed': 'skiplock (concurrencyKey over 1,000 keys, limit 1)',
  pgboss12: 'pg-boss 12 (batch 100, poll 0.5 s)',
  'pgboss12-group': 'pg-boss 12 (groupConcurrency 1 over 1,000 groups)',
  'skiplock-saga': 'skiplock saga (defaults)',
  dbos: 'DBOS 5.3 workflow',
  'skiplock-relay': 'skiplock outbox relay (PostgreSQL → broker)',
  'broker-direct': "the broker's client alone, no database (ceiling)",
};

export const labelOf = (id: string): string => systemLabels[id] ?? id;
