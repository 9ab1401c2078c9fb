import { UsageError, parseOptions, positionalArgs } from '../args.js';
import type { Command } from '../io.js';

export const sagasGraphCommand: Command = {
  name: 'sagas graph',
  summary: 'print a saga definition as a Mermaid flowchart: steps, waits, pivot, compensations',
  usage: [
    'usage: skiplock sagas graph <name> --module FILE',
    '',
    '  --module FILE   the module (TypeScript or JavaScript) that exports the saga definition',
    '',
    'Prints the diagram of the newest version of saga <name> that FILE exports (any export',
    'made with defineSaga, or an array of them). No database is needed.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { module: { type: 'string' } });
    const [name] = positionalArgs(positionals, ['<name>']);
    if (typeof values.module !== 'string') throw new UsageError('--module FILE is required');
    const [{ loadSagaModule }, { sagaGraph }] = await Promise.all([
      import('../load-sagas.js'),
      import('@skiplock/saga'),
    ]);
    const sagas = await loadSagaModule(values.module, io.cwd);
    const matching = sagas.filter((s) => s.name === name);
    if (matching.length === 0) {
      throw new UsageError(
        `${values.module} exports no saga named ${JSON.stringify(name)}; it exports ` +
          (sagas.map((s) => `${s.name} v${s.version}`).join(', ') || 'none'),
      );
    }
    const newest = matching.reduce((a, b) => (b.version > a.version ? b : a));
    io.stdout(sagaGraph(newest));
    return 0;
  },
};
