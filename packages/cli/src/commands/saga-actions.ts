import {
  CliError,
  UsageError,
  databaseOption,
  databaseUrl,
  jsonOption,
  parseOptions,
  parseSagaId,
  positionalArgs,
} from '../args.js';
import { printJson, type CliIo, type Command } from '../io.js';
import type { CancelResult, RetryResult, SagaRuntime, StrandedJob } from '@skiplock/saga';
import { strandedText } from '../format/saga.js';
import { LOCK_WAIT_MS } from './job-action-command.js';

const MODULE_HELP = [
  '  --module FILE   the module (TypeScript or JavaScript) that exports the saga definitions',
  '                  (as for `sagas graph`); the saga\u2019s name and version must be among them',
];

/**
 * The command line of a saga action: the saga id and the positionals `names` after it,
 * `--module` (required), `--json`, `--database-url`, and `--payload` for a signal.
 */
function parseSagaAction(args: string[], io: CliIo, names: string[] = [], withPayload = false) {
  const { values, positionals } = parseOptions(args, {
    ...databaseOption,
    ...jsonOption,
    module: { type: 'string' },
    ...(withPayload ? { payload: { type: 'string' } } : {}),
  });
  const [id, ...rest] = positionalArgs(positionals, ['<id>', ...names]);
  if (typeof values.module !== 'string') throw new UsageError('--module FILE is required');
  const payload = (values as { payload?: unknown }).payload;
  return {
    id: parseSagaId(id!),
    rest,
    json: values.json === true,
    payload: typeof payload === 'string' ? payload : undefined,
    module: values.module,
    url: databaseUrl(values['database-url'], io.env),
  };
}

/**
 * Runs `act` with a saga runtime over the module's definitions, after checking that the saga
 * exists and that the module has its name and version: the runtime needs the definition to
 * compensate, retry or resume it. Its errors (`SagaError`s, named by code) exit 1.
 */
async function withSagaRuntime<T>(
  io: CliIo,
  { id, module, url }: { id: string; module: string; url: string },
  act: (runtime: SagaRuntime) => Promise<T>,
  /** Given the parent's result when its children's cancel or retry threw (see below). */
  partly?: (result: T, children: string[]) => void,
): Promise<T> {
  const [{ loadSagaModule }, { withDatabase }, saga, { pino }] = await Promise.all([
    import('../load-sagas.js'),
    import('../database.js'),
    import('@skiplock/saga'),
    import('pino'),
  ]);
  const definitions = await loadSagaModule(module, io.cwd);
  return withDatabase(url, async (db) => {
    const seen = await saga.readSaga(db.pool, id);
    if (!seen) throw new CliError(`saga ${JSON.stringify(id)} does not exist`);
    if (!definitions.some((d) => d.name === seen.name && d.version === seen.version)) {
      throw new CliError(
        `saga ${JSON.stringify(id)} is ${seen.name} v${seen.version}, which ${module} does not ` +
          `export; it exports ${definitions.map((d) => `${d.name} v${d.version}`).join(', ')}`,
      );
    }
    // Its own log lines would repeat what the command prints; errors reach the command.
    const runtime = saga.createSagaRuntime({
      pool: db.pool,
      sagas: definitions,
      logger: pino({ level: 'silent' }),
    });
    try {
      return await act(runtime);
    } catch (error) {
      if (error instanceof saga.ChildSagasError && partly) {
        // The parent's cancel or retry took effect; some children's threw: --json still says
        // what happened to the parent (found in review: it printed nothing), and the exit is 1.
        const children = (error.children as { sagaId: string }[]).map((c) => c.sagaId);
        partly(error.result as T, children);
      }
      if (error instanceof saga.SagaError) {
        // Most runtime messages name the saga already.
        const named = error.message.includes(JSON.stringify(id));
        throw new CliError(
          `${named ? '' : `saga ${JSON.stringify(id)}: `}${error.message} (${error.code})`,
        );
      }
      throw error;
    } finally {
      await runtime.close();
    }
  });
}

export const sagasCancelCommand: Command = {
  name: 'sagas cancel',
  summary: 'cancel a saga before its pivot: it compensates what it completed, then ends cancelled',
  usage: [
    'usage: skiplock sagas cancel <id> --module FILE [--json] [--database-url URL]',
    '',
    ...MODULE_HELP,
    '',
    'A queued or waiting saga starts compensating at once; a running step finishes first. The',
    'compensations run on your workers. Exits 1 when the cancel is refused: the saga has ended',
    '(finished), passed its pivot (pivoted) or is compensating already. A saga stranded on a job',
    'that died where no saga hook ran (see `sagas show`) keeps the cancel until a reconciler moves',
    'it (`sagas reconcile`); the command says so.',
  ].join('\n'),
  async run(args, io) {
    const action = parseSagaAction(args, io);
    const { id } = action;
    const json = (
      result: CancelResult,
      childrenNotCancelled: string[] = [],
      stranded: StrandedJob | null = null,
    ) =>
      printJson(io, {
        id,
        accepted: result.accepted,
        status: result.status,
        reason: result.reason ?? null,
        childrenNotCancelled,
        stranded,
      });
    let stranded: StrandedJob | null = null;
    const result = await withSagaRuntime(
      io,
      action,
      async (runtime) => {
        const result = await runtime.cancel(id, { lockWaitMs: LOCK_WAIT_MS });
        // A cancel only asks: the saga's step moves it to compensation when it ends. A saga on a
        // job that died unseen has no step left to end, so the cancel waits for a reconciler
        // (found in an audit: "compensates what it completed" was printed and nothing moved).
        if (result.accepted) stranded = (await runtime.getSaga(id))?.stranded ?? null;
        return result;
      },
      (partial, children) => action.json && json(partial, children),
    );
    if (action.json) json(result, [], stranded);
    if (!result.accepted) {
      throw new CliError(
        `saga ${JSON.stringify(id)} is ${result.status}; cancel refused (${result.reason ?? 'finished'})`,
      );
    }
    if (!action.json) {
      io.stdout(
        stranded
          ? `saga ${id}: cancel recorded, but nothing moves the saga yet; ${strandedText(stranded)}, ` +
              'and it then compensates what it completed\n'
          : `saga ${id}: cancel accepted; it is ${result.status} and compensates what it completed\n`,
      );
    }
    return 0;
  },
};

export const sagasRetryCommand: Command = {
  name: 'sagas retry',
  summary: 'run the step or compensation of a failed saga again, with fresh attempts',
  usage: [
    'usage: skiplock sagas retry <id> --module FILE [--json] [--database-url URL]',
    '',
    ...MODULE_HELP,
    '',
    'A saga fails when a step past its pivot or a compensation failed for good. Its dead job runs',
    'again with fresh attempts and the saga goes on from there. Exits 1 when nothing was retried,',
    'with the reason (not_failed, no_failed_step, job_gone, lock_busy, ...).',
  ].join('\n'),
  async run(args, io) {
    const action = parseSagaAction(args, io);
    const { id } = action;
    const json = (result: RetryResult, childrenNotRetried: string[] = []) =>
      printJson(io, {
        id,
        retried: result.retried,
        step: result.step ?? null,
        kind: result.kind ?? null,
        reason: result.reason ?? null,
        childrenNotRetried,
      });
    const result = await withSagaRuntime(
      io,
      action,
      (runtime) => runtime.retryFailed(id, { lockWaitMs: LOCK_WAIT_MS }),
      (partial, children) => action.json && json(partial, children),
    );
    if (action.json) json(result);
    if (!result.retried) {
      throw new CliError(
        `saga ${JSON.stringify(id)}: nothing retried (${result.reason ?? 'not_failed'})`,
      );
    }
    if (!action.json) {
      const what = result.kind === 'compensation' ? 'compensation of' : 'step';
      io.stdout(`saga ${id}: ${what} ${result.step ?? '?'} runs again\n`);
    }
    return 0;
  },
};

export const sagasSignalCommand: Command = {
  name: 'sagas signal',
  summary: 'deliver a named signal to a saga (once per name), resuming the step that waits for it',
  usage: [
    'usage: skiplock sagas signal <id> <name> --module FILE [--payload JSON] [--json]',
    '                             [--database-url URL]',
    '',
    ...MODULE_HELP,
    '  --payload JSON  the signal\u2019s payload (default null), checked by the wait\u2019s schema',
    '',
    'A signal of a name is delivered once; a repeat is ignored (exit 0, "already delivered").',
    'One that arrives before its wait is stored for it. Exits 1 when the payload fails the',
    'schema, naming the fields.',
  ].join('\n'),
  async run(args, io) {
    const action = parseSagaAction(args, io, ['<name>'], true);
    const { id } = action;
    const name = action.rest[0]!;
    let payload: unknown = null;
    if (action.payload !== undefined) {
      try {
        payload = JSON.parse(action.payload);
      } catch (error) {
        throw new UsageError(`--payload is not JSON: ${(error as Error).message}`);
      }
    }
    const { result, status } = await withSagaRuntime(io, action, async (runtime) => {
      const result = await runtime.signal(id, name, payload, { lockWaitMs: LOCK_WAIT_MS });
      return { result, status: (await runtime.getSaga(id))?.status ?? 'gone' };
    });
    if (action.json) {
      printJson(io, {
        id,
        signal: name,
        delivered: result.delivered,
        resumed: result.resumed,
        status,
      });
      return 0;
    }
    const outcome = !result.delivered
      ? 'was delivered before; this one is ignored'
      : result.resumed
        ? 'delivered; the step waiting for it moved the saga on'
        : 'stored; no step waits for it now (a wait for it that starts later takes it)';
    io.stdout(`saga ${id}: signal ${name} ${outcome}; the saga is ${status}\n`);
    return 0;
  },
};
