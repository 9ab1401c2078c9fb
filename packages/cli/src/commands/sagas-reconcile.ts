import type { UnknownVersionPolicy } from '@skiplock/saga';
import {
  UsageError,
  databaseOption,
  databaseUrl,
  jsonOption,
  parseInteger,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { printJson, type Command } from '../io.js';

/** Passes one command runs at most: 1,000 pages of `--batch-size` live sagas. */
const MAX_PASSES = 1_000;

/** Left sagas the text output names; `--json` lists them all. */
const LEFT_SHOWN = 20;

/**
 * `@skiplock/saga`'s `UNKNOWN_VERSION_POLICIES`, repeated so that a bad value is refused before
 * the library loads (as every command's arguments are); `satisfies` checks each is one it takes.
 */
const UNKNOWN_VERSIONS = ['leave', 'fail'] as const satisfies readonly UnknownVersionPolicy[];

export const sagasReconcileCommand: Command = {
  name: 'sagas reconcile',
  summary:
    "run a saga runtime's reconciler over every live saga: move on those whose job died unseen",
  usage: [
    'usage: skiplock sagas reconcile --module FILE [--batch-size N] [--json]',
    '                                [--unknown-versions leave|fail] [--database-url URL]',
    '',
    '  --module FILE     the module (TypeScript or JavaScript) that exports the saga definitions',
    '                    (as for `sagas graph`): every version still in flight',
    '  --batch-size N    sagas one pass looks at of each kind, 1 to 10000 (default 100): live',
    '                    ones least recently moved first, waiting ones oldest first (and ten',
    '                    times as many candidate parents of ended child sagas); passes go on',
    '                    until every one was looked at (1,000 passes at most)',
    '  --unknown-versions leave|fail',
    '                    a stranded saga of a name or version the module does not define (or at',
    '                    a step its version lacks): leave it (default) for a module that does,',
    '                    which compensates its completed steps, or fail it now without',
    '                    compensation (for a version retired for good)',
    '',
    'A saga whose step job died where no saga hook ran (a worker or sweeper without its job types,',
    'a job cancelled or deleted by hand) stays running until a reconciler looks at it; `sagas show`',
    'calls it stranded. `skiplock worker` runs the reconciler of a saga runtime its module exports;',
    'this runs its passes now. A stranded step fails for good: the saga compensates (or fails',
    'past its pivot); a stranded compensation fails the saga. A stranded saga of a name or version',
    'the module does not export is left and named (see --unknown-versions). Exits 0 also when',
    'another process was running a pass (nothing done here; it says so).',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      ...jsonOption,
      module: { type: 'string' },
      'batch-size': { type: 'string' },
      'unknown-versions': { type: 'string' },
    });
    positionalArgs(positionals, []);
    if (typeof values.module !== 'string') throw new UsageError('--module FILE is required');
    const batchSize = parseInteger('--batch-size', values['batch-size'], { min: 1, max: 10_000 });
    const unknownVersions = parseUnknownVersions(values['unknown-versions']);
    const url = databaseUrl(values['database-url'], io.env);
    const [{ loadSagaModule }, { withDatabase }, { createSagaRuntime }, { pino }] =
      await Promise.all([
        import('../load-sagas.js'),
        import('../database.js'),
        import('@skiplock/saga'),
        import('pino'),
      ]);
    const sagas = await loadSagaModule(values.module, io.cwd);
    const { ran, moved, left } = await withDatabase(url, async (db) => {
      // Its own log lines would repeat what the command prints.
      const runtime = createSagaRuntime({
        pool: db.pool,
        sagas,
        logger: pino({ level: 'silent' }),
        reconciler: { batchSize, unknownVersions },
      });
      try {
        // Pass after pass until every live saga was looked at: one pass reads `batchSize` of
        // them, least recently moved first, and said "none found" while a stranded one waited
        // further back (found in review). Bounded: MAX_PASSES pages.
        const ids: string[] = [];
        const left = new Set<string>();
        let result = await runtime.reconciler.runOnce();
        ids.push(...result.sagaIds);
        result.left.forEach((id) => left.add(id));
        for (let pass = 1; result.ran && result.more && pass < MAX_PASSES; pass++) {
          result = await runtime.reconciler.runOnce();
          ids.push(...result.sagaIds);
          result.left.forEach((id) => left.add(id));
        }
        const moved: { id: string; status: string }[] = [];
        for (const id of new Set(ids)) {
          moved.push({ id, status: (await runtime.getSaga(id))?.status ?? 'gone' });
        }
        return { ran: result.ran || ids.length > 0, moved, left: [...left] };
      } finally {
        await runtime.close();
      }
    });
    if (values.json) {
      printJson(io, { ran, reconciled: moved.length, sagas: moved, left });
      return 0;
    }
    if (!ran) {
      io.stdout('another process is running a reconciler pass now; nothing done here\n');
    } else if (moved.length === 0 && left.length === 0) {
      io.stdout('no stranded saga found\n');
    } else if (moved.length > 0) {
      const n = moved.length;
      io.stdout(
        `${n} saga${n === 1 ? '' : 's'} moved on:\n` +
          moved.map((m) => `  ${m.id}  now ${m.status}\n`).join(''),
      );
    }
    if (ran && left.length > 0) io.stdout(leftText(left));
    return 0;
  },
};

function parseUnknownVersions(value: string | undefined): UnknownVersionPolicy | undefined {
  if (value === undefined) return undefined;
  if (!(UNKNOWN_VERSIONS as readonly string[]).includes(value)) {
    throw new UsageError(`--unknown-versions must be leave or fail, got "${value}"`);
  }
  return value as UnknownVersionPolicy;
}

/** The stranded sagas left, and what moves them: a module that defines them, or a failing run. */
function leftText(left: readonly string[]): string {
  const n = left.length;
  const shown = left.slice(0, LEFT_SHOWN).map((id) => `  ${id}\n`);
  if (n > LEFT_SHOWN) shown.push(`  ... and ${n - LEFT_SHOWN} more (--json lists them all)\n`);
  return (
    `${n} stranded saga${n === 1 ? '' : 's'} left as ${n === 1 ? 'it is' : 'they are'}: the ` +
    'module does not define the version (or the step) each is on; a module that does moves ' +
    'them on and compensates, or --unknown-versions fail fails them without compensation:\n' +
    shown.join('')
  );
}
