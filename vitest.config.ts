import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';

// In the workspace, `@skiplock/*` resolve to their TypeScript sources through this export
// condition (each package.json maps it to src/), so tests need no build step; installed packages
// never set it and get dist/. Child processes the tests start (CLI, demo, workers) inherit it.
const sourceCondition = 'skiplock-source';
// Vite's own server conditions (`node`, `development|production`) come after ours.
const conditions = [sourceCondition, 'node', 'development|production'];
if (!process.env.NODE_OPTIONS?.includes(`--conditions=${sourceCondition}`)) {
  process.env.NODE_OPTIONS =
    `${process.env.NODE_OPTIONS ?? ''} --conditions=${sourceCondition}`.trim();
}

export default defineConfig({
  ssr: { resolve: { conditions } },
  // Vitest loads the global setup in its own `__vitest__` environment, which does not read `ssr`.
  environments: { __vitest__: { resolve: { conditions } } },
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    pool: 'forks',
    // Two files at a time even on 2 cores, where Vitest's default (one less than the cores) runs
    // them one by one: most of a file's time is spent waiting on PostgreSQL, brokers and child
    // processes, and every file has its own database, brokers' names and ports. The whole suite
    // on PostgreSQL 15 on this 2-core machine: 9 min 11 s one by one, 8 min 22 s with the crash
    // project below one at a time (Vitest runs it after the other, on the same two workers), 6 min
    // 39 s with every file two at a time (not kept: see the crash project).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    projects: [
      {
        extends: true,
        test: {
          name: 'suite',
          include: [
            'packages/*/test/**/*.test.ts',
            'examples/*/test/**/*.test.ts',
            'test/**/*.test.ts',
          ],
          exclude: [...configDefaults.exclude, 'test/crash/**'],
          typecheck: {
            enabled: true,
            include: ['packages/*/test/**/*.test-d.ts'],
            tsconfig: './tsconfig.json',
          },
        },
      },
      // The crash tests one at a time: each runs several worker processes against the server with
      // pools of their own (up to 56 connections). Two of them at once, beside another run on the
      // same server, took 93 of PostgreSQL 15's default 100 connections, and two missed their
      // deadlines on 2 cores.
      {
        extends: true,
        test: { name: 'crash', include: ['test/crash/**/*.test.ts'], fileParallelism: false },
      },
    ],
  },
});
