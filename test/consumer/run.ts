// The consumer test: what a user outside this repository gets. Packs every package, serves the
// tarballs from a loopback registry, installs @skiplock/saga, @skiplock/outbox and @skiplock/cli (which brings @skiplock/dashboard) with npm into a
// fresh project, type-checks the README programs there with strict compiler flags, and runs
// them, a CommonJS program and the installed CLI with plain `node` against a real database.
// Run: `pnpm test:consumer` (DATABASE_URL, else the same database the tests would start).
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cp, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { promisify } from 'node:util';
import { createDatabase, dropDatabase, startDatabase } from '@skiplock/devdb';
import { packAll, publishedPackages, repoRoot as root } from '../../scripts/pack.js';

/** What a user installs, in dependency order. */
const PUBLISHED = [
  'packages/queue',
  'packages/saga',
  'packages/outbox',
  'packages/dashboard',
  'packages/cli',
];
import { startLocalRegistry } from './registry.js';

interface Run {
  code: number;
  /** The signal that ended the process, when one did (code is then -1). */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end; never rejects, so a check can look at a failure's output. */
function run(
  command: string,
  args: string[],
  options: { cwd: string; env?: Record<string, string | undefined>; timeoutMs?: number },
): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      // The workspace's source condition must not leak into the consumer: it gets dist/.
      env: { ...process.env, NODE_OPTIONS: undefined, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, signal, stdout, stderr });
    });
  });
}

/** Starts a long-running command, sends SIGTERM once `readyLine` appears on stdout. */
function runUntil(
  command: string,
  args: string[],
  options: {
    cwd: string;
    env: Record<string, string | undefined>;
    readyLine: string;
    /** Runs once the ready line is out, before SIGTERM; given what stdout held then. */
    whenReady?: (stdout: string) => Promise<void>;
  },
): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: { ...process.env, NODE_OPTIONS: undefined, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let signalled = false;
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
      if (!signalled && stdout.includes(options.readyLine)) {
        signalled = true;
        const ready = options.whenReady?.(stdout) ?? Promise.resolve();
        // A failed check is recorded by the caller's own check; the process is stopped either way.
        void ready.catch(() => {}).finally(() => child.kill('SIGTERM'));
      }
    });
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, signal, stdout, stderr });
    });
  });
}

function check(condition: unknown, what: string, detail = ''): asserts condition {
  if (!condition) throw new Error(`consumer test: ${what}${detail ? `\n${detail}` : ''}`);
  console.log(`ok - ${what}`);
}

async function must(what: string, result: Promise<Run>): Promise<Run> {
  const r = await result;
  check(r.code === 0, what, `exit ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r;
}

const work = await mkdtemp(join(tmpdir(), 'skiplock-consumer-'));
const db = await startDatabase();
const dbName = `skiplock_consumer_${randomBytes(4).toString('hex')}`;
let registry: Awaited<ReturnType<typeof startLocalRegistry>> | null = null;
try {
  // 1. Pack, as `npm publish` would: prepack cleans and builds each package, in dependency order.
  const tarballs = join(work, 'tarballs');
  // The packages a user installs, named here: one turned private (or a new one) by mistake
  // changes what is published, and this says so.
  const published = (await publishedPackages()).map((p) => p.dir);
  check(
    published.join(' ') === PUBLISHED.join(' '),
    `publishes ${PUBLISHED.join(', ')}, in that order`,
    `publishedPackages() gave ${published.join(', ')}`,
  );
  const files = await packAll(tarballs, (pkg) => console.log(`ok - pnpm pack ${pkg.dir}`));
  for (const file of files) {
    const list = (await promisify(execFile)('tar', ['-tzf', file])).stdout.split('\n');
    check(
      !list.some((f) => /^package\/(test|bench)\//.test(f) || /\.test\.ts$/.test(f)),
      `${file.split('/').pop()} ships no tests`,
    );
    check(
      list.some((f) => /^package\/dist\/.*\.js$/.test(f)),
      `${file.split('/').pop()} ships JavaScript`,
    );
    // Every source a source map names is in the tarball: the CLI's maps named ../src files it
    // did not ship (found in an audit), so a stack trace led nowhere.
    const inside = new Set(list);
    const missing: string[] = [];
    for (const map of list.filter((f) => f.endsWith('.map'))) {
      const { stdout } = await promisify(execFile)('tar', ['-xzOf', file, map], {
        maxBuffer: 64 * 1024 * 1024,
      });
      for (const source of (JSON.parse(stdout) as { sources?: string[] }).sources ?? []) {
        const path = posix.normalize(posix.join(posix.dirname(map), source));
        if (!inside.has(path)) missing.push(`${map} -> ${source}`);
      }
    }
    check(
      missing.length === 0,
      `${file.split('/').pop()} ships the sources its source maps name`,
      missing.slice(0, 5).join('\n'),
    );
  }

  // 2. A fresh project outside the workspace, our packages from the loopback registry.
  registry = await startLocalRegistry(files);
  const app = join(work, 'app');
  await mkdir(join(app, 'src'), { recursive: true });
  await writeFile(
    join(app, 'package.json'),
    JSON.stringify({ name: 'consumer', private: true, type: 'module' }, null, 2),
  );
  await writeFile(join(app, '.npmrc'), `@skiplock:registry=${registry.url}\n`);
  await must(
    'npm install @skiplock/saga @skiplock/outbox @skiplock/cli (by name and version)',
    run(
      'npm',
      [
        'install',
        '--no-audit',
        '--no-fund',
        '@skiplock/saga@0.1.0',
        '@skiplock/outbox@0.1.0',
        '@skiplock/cli@0.1.0',
        'standardwebhooks@^1',
        'zod@^4',
        'pg@^8',
        'typescript@5.9.3',
        '@types/node@^20',
        '@types/pg@^8',
      ],
      { cwd: app, timeoutMs: 300_000 },
    ),
  );
  const queueManifest = JSON.parse(
    await readFile(join(app, 'node_modules/@skiplock/queue/package.json'), 'utf8'),
  ) as { version: string };
  check(
    registry.requested.includes('@skiplock/queue') && queueManifest.version === '0.1.0',
    'installing @skiplock/saga pulled @skiplock/queue 0.1.0 from the registry',
    `requested: ${registry.requested.join(', ')}`,
  );

  // 3. The README programs, type-checked with strict flags against the installed .d.ts files.
  for (const program of ['queue.ts', 'saga.ts', 'outbox.ts']) {
    await cp(join(root, 'examples/readme/src', program), join(app, 'src', program));
  }
  await cp(join(root, 'test/consumer/app/tsconfig.json'), join(app, 'tsconfig.json'));
  await cp(join(root, 'test/consumer/app/commonjs.cjs'), join(app, 'commonjs.cjs'));
  await cp(join(root, 'test/consumer/app/jobs.ts'), join(app, 'jobs.ts'));
  await must(
    'tsc with strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess, noPropertyAccessFromIndexSignature',
    run(join(app, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], { cwd: app }),
  );

  // 4. Run them with plain node on a database of their own.
  const url = await createDatabase(db.url, dbName);
  const env = { DATABASE_URL: url, SKIPLOCK_LOG_LEVEL: 'warn' };
  const queue = await must('node dist/queue.js', run('node', ['dist/queue.js'], { cwd: app, env }));
  check(
    /job \d+: completed/.test(queue.stdout),
    'the queue program completed its job',
    queue.stdout,
  );
  const saga = await must('node dist/saga.js', run('node', ['dist/saga.js'], { cwd: app, env }));
  check(
    saga.stdout.includes('saga inv_1: completed') &&
      saga.stdout.includes('saga inv_2: compensated (reserve → charge → undo reserve)'),
    'the saga program completed one saga and compensated the other',
    saga.stdout,
  );
  const outbox = await must(
    'node dist/outbox.js',
    run('node', ['dist/outbox.js'], { cwd: app, env }),
  );
  check(
    /^webhook msg_\d+: \{"type":"order\.placed",.*\(verified\)$/m.test(outbox.stdout),
    'the outbox program relayed its event to a verifying webhook receiver',
    outbox.stdout,
  );
  const cjs = await must('node commonjs.cjs', run('node', ['commonjs.cjs'], { cwd: app, env }));
  check(
    /commonjs: job \d+ inserted=true status=pending/.test(cjs.stdout),
    'require() works',
    cjs.stdout,
  );

  // 5. The installed CLI, on plain node.
  const bin = join(app, 'node_modules/.bin/skiplock');
  const migrate = await must('skiplock migrate', run(bin, ['migrate'], { cwd: app, env }));
  check(
    migrate.stdout === 'skiplock schema was already up to date\n',
    'skiplock migrate finds the schema the programs migrated',
    migrate.stdout,
  );
  const stats = await must(
    'skiplock stats --json',
    run(bin, ['stats', '--json'], { cwd: app, env }),
  );
  const parsed = JSON.parse(stats.stdout) as { stats: { queue: string }[] };
  check(
    parsed.stats.some((s) => s.queue === 'default'),
    'skiplock stats --json prints JSON only',
    stats.stdout,
  );
  // `skiplock outbox` loads @skiplock/outbox, an optional peer, from the app's own install.
  const outboxStats = await must(
    'skiplock outbox stats --json',
    run(bin, ['outbox', 'stats', '--json'], { cwd: app, env }),
  );
  const counted = JSON.parse(outboxStats.stdout) as { delivered: number; dead: number };
  check(
    counted.delivered >= 1 && counted.dead === 0,
    'skiplock outbox stats counts the event the outbox program relayed',
    outboxStats.stdout,
  );
  /** Runs `skiplock dashboard` until it listens, fetches `paths` ("status body" each), stops it. */
  const dashboardPages = async (paths: string[]) => {
    const pages: string[] = [];
    const result = await runUntil(bin, ['dashboard', '--port', '0'], {
      cwd: app,
      env: { ...env, SKIPLOCK_LOG_LEVEL: 'info' },
      readyLine: '"reason":"dashboard_listening"',
      whenReady: async (stdout) => {
        const url = /"url":"(http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
        for (const path of paths) {
          const response = await fetch(`${url}${path}`);
          pages.push(`${response.status} ${await response.text()}`);
        }
      },
    });
    return { ...result, pages };
  };
  // The dashboard from the installed @skiplock/dashboard (dist/ and its assets/), up and stopped;
  // its outbox page loads @skiplock/outbox, an optional peer, from the app's own install.
  const dashboard = await dashboardPages(['/outbox']);
  const [outboxPage = ''] = dashboard.pages;
  check(
    dashboard.code === 0 && dashboard.stdout.includes('"url":"http://127.0.0.1:'),
    'skiplock dashboard serves from the installed package on loopback, and SIGTERM stops it',
    `exit ${dashboard.code} signal ${dashboard.signal}\n${dashboard.stdout}\n${dashboard.stderr}`,
  );
  check(
    outboxPage.startsWith('200 ') && outboxPage.includes('data-testid="outbox-delivered"'),
    'the installed dashboard shows the outbox, from the installed @skiplock/outbox',
    outboxPage.slice(0, 2_000),
  );
  // The same project without @skiplock/outbox (moved aside, then back), as a project with no
  // outbox installs it: the CLI says what is missing, the dashboard serves the rest.
  const outboxDir = join(app, 'node_modules/@skiplock/outbox');
  const aside = join(work, 'outbox-aside');
  await rename(outboxDir, aside);
  try {
    const noOutbox = await run(bin, ['outbox', 'stats'], { cwd: app, env });
    check(
      noOutbox.code !== 0 &&
        noOutbox.stderr.includes('@skiplock/outbox is not installed beside @skiplock/cli'),
      'without @skiplock/outbox installed, skiplock outbox says it is not installed',
      `exit ${noOutbox.code}\n${noOutbox.stdout}\n${noOutbox.stderr}`,
    );
    const bare = await dashboardPages(['/', '/outbox']);
    const [overview = '', missing = ''] = bare.pages;
    check(
      bare.code === 0 &&
        overview.startsWith('200 ') &&
        missing.startsWith('200 ') &&
        missing.includes('data-testid="outbox-missing"') &&
        missing.includes('is not installed beside the dashboard'),
      'without @skiplock/outbox installed, the dashboard serves its pages and its outbox page says so',
      `exit ${bare.code}\n${bare.stderr}\n${missing.slice(0, 2_000)}`,
    );
  } finally {
    await rename(aside, outboxDir);
  }
  const worker = await run(bin, ['worker', 'jobs.ts'], { cwd: app, env });
  check(
    worker.code === 1 && worker.stderr.includes('npm install --save-dev tsx'),
    'skiplock worker on a TypeScript module without tsx says how to get it',
    worker.stderr,
  );
  // With tsx installed beside it, the same command loads the TypeScript module and works.
  await must(
    'npm install tsx',
    run('npm', ['install', '--no-audit', '--no-fund', '--save-dev', 'tsx@^4'], {
      cwd: app,
      timeoutMs: 300_000,
    }),
  );
  // SIGTERM goes out the moment the worker logs jobs_loaded, as a supervisor might send it. The
  // handlers once went in after that line and such a signal killed the process about one time in
  // three on plain node (tsx's own listeners hide it in the workspace's tests), so five runs.
  for (let attempt = 1; attempt <= 5; attempt += 1) {
    const started = await runUntil(bin, ['worker', 'jobs.ts'], {
      cwd: app,
      env: { ...env, SKIPLOCK_LOG_LEVEL: 'info' },
      readyLine: '"reason":"jobs_loaded"',
    });
    check(
      started.code === 0 && started.stdout.includes('"jobTypes":["noop"]'),
      `skiplock worker loads a TypeScript module through tsx, and SIGTERM stops it with exit 0 (run ${attempt})`,
      `exit ${started.code} signal ${started.signal}\n${started.stdout}\n${started.stderr}`,
    );
  }
  // The same module in a CommonJS project ("type": "commonjs", what `npm init -y` writes): Node
  // loads its .ts as CommonJS. The installed CLI registered tsx's ES module hooks only ("Cannot
  // require() ES Module … in a cycle"), then found no definitions in what the import gave
  // (`{ default: module.exports }`); the workspace's tests, with tsx preloaded, saw neither.
  const cjsApp = join(app, 'cjs');
  await mkdir(cjsApp);
  await writeFile(
    join(cjsApp, 'package.json'),
    JSON.stringify({ name: 'consumer-cjs', private: true, type: 'commonjs' }, null, 2),
  );
  await cp(join(root, 'test/consumer/app/jobs.ts'), join(cjsApp, 'jobs.ts'));
  const cjsWorker = await runUntil(bin, ['worker', 'jobs.ts'], {
    cwd: cjsApp,
    env: { ...env, SKIPLOCK_LOG_LEVEL: 'info' },
    readyLine: '"reason":"jobs_loaded"',
  });
  check(
    cjsWorker.code === 0 && cjsWorker.stdout.includes('"jobTypes":["noop"]'),
    'skiplock worker loads a TypeScript module of a CommonJS project through tsx',
    `exit ${cjsWorker.code} signal ${cjsWorker.signal}\n${cjsWorker.stdout}\n${cjsWorker.stderr}`,
  );
  // `.mts` and `.cts` modules, in an ES module project and in a CommonJS one. A `.cts` module
  // failed to load ("Cannot read properties of undefined (reading 'exports')"): imported, it went
  // to Node's CommonJS loader, whose require() of @skiplock/queue (an ES module) under tsx's
  // hooks fails on Node 20 (found in a trial).
  for (const [dir, file] of [
    [app, 'jobs.mts'],
    [app, 'jobs.cts'],
    [cjsApp, 'jobs.cts'],
  ] as const) {
    await cp(join(root, 'test/consumer/app/jobs.ts'), join(dir, file));
    const loaded = await runUntil(bin, ['worker', file], {
      cwd: dir,
      env: { ...env, SKIPLOCK_LOG_LEVEL: 'info' },
      readyLine: '"reason":"jobs_loaded"',
    });
    check(
      loaded.code === 0 && loaded.stdout.includes('"jobTypes":["noop"]'),
      `skiplock worker loads a ${file} module of ${dir === app ? 'an ES module' : 'a CommonJS'} project through tsx`,
      `exit ${loaded.code} signal ${loaded.signal}\n${loaded.stdout}\n${loaded.stderr}`,
    );
  }
  console.log('consumer test passed');
} finally {
  await registry?.close();
  await dropDatabase(db.url, dbName).catch(() => {});
  await db.stop();
  await rm(work, { recursive: true, force: true });
}
