import {
  UsageError,
  databaseOption,
  databaseUrl,
  parseInteger,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { logDestination, type Command } from '../io.js';

const DEFAULT_HOST = '127.0.0.1';
const DEFAULT_PORT = 4600;

export const dashboardCommand: Command = {
  name: 'dashboard',
  summary: 'serve the web dashboard: queues, jobs and sagas, with retry, cancel and signal',
  usage: [
    'usage: skiplock dashboard [--host H] [--port N] [--token T] [--read-only] [--hide-payloads]',
    '                          [--module FILE] [--base-path P] [--database-url URL]',
    '',
    `  --host H         address to listen on (default ${DEFAULT_HOST}); any other than loopback`,
    '                   needs a token, and then reading needs signing in too',
    `  --port N         port (default ${DEFAULT_PORT}; 0 picks a free one)`,
    '  --token T        the operator token that retry, cancel and signal need (default',
    '                   $SKIPLOCK_DASHBOARD_TOKEN); without one the dashboard only reads',
    '  --read-only      no actions at all, whatever the token',
    '  --hide-payloads  show no job payloads, saga inputs, outputs or signal payloads',
    '  --module FILE    a module exporting saga definitions (as for `sagas graph`): draws them,',
    '                   and lets the dashboard cancel and signal their sagas',
    '  --base-path P    serve under this path (default /), e.g. behind a reverse proxy',
    '',
    'Runs until SIGTERM or SIGINT. Logs are JSON lines on stdout; every action is logged with',
    'the name the operator signed in with (reason dashboard_job_retry, dashboard_saga_cancel...).',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      host: { type: 'string' },
      port: { type: 'string' },
      token: { type: 'string' },
      'read-only': { type: 'boolean' },
      'hide-payloads': { type: 'boolean' },
      module: { type: 'string' },
      'base-path': { type: 'string' },
    });
    positionalArgs(positionals, []);
    const host = values.host ?? DEFAULT_HOST;
    const port = parseInteger('--port', values.port, { min: 0, max: 65_535 }) ?? DEFAULT_PORT;
    const token = values.token ?? (io.env.SKIPLOCK_DASHBOARD_TOKEN || undefined);
    if (token !== undefined && token.length < 8) {
      throw new UsageError('--token must be at least 8 characters (use a long random string)');
    }
    const basePath = values['base-path'];
    if (basePath !== undefined && !/^\/[A-Za-z0-9._~/-]*$/.test(basePath)) {
      throw new UsageError('--base-path must be a path such as /skiplock');
    }
    const [{ createDashboard, isLoopback }, { pino }, { openDatabase }] = await Promise.all([
      import('@skiplock/dashboard'),
      import('pino'),
      import('../database.js'),
    ]);
    const loopback = isLoopback(host);
    if (!loopback && token === undefined) {
      throw new UsageError(
        `refusing to listen on ${host} without a token: anyone who reaches it could read every ` +
          'payload; pass --token (or SKIPLOCK_DASHBOARD_TOKEN), or keep the default 127.0.0.1',
      );
    }
    const url = databaseUrl(values['database-url'], io.env);
    const sagas = values.module
      ? await (await import('../load-sagas.js')).loadSagaModule(values.module, io.cwd)
      : [];
    const logger = pino(
      {
        name: 'skiplock-dashboard',
        level: io.env.SKIPLOCK_LOG_LEVEL ?? 'info',
        redact: ['payload', 'password', 'token', 'connectionString', '*.payload', '*.password'],
      },
      logDestination(io),
    );
    const db = await openDatabase(url, {
      maxConnections: 4,
      applicationName: 'skiplock-dashboard',
      onPoolError: (error) =>
        logger.warn({ reason: 'db_error', err: error.message }, 'idle connection error'),
    });
    const dashboard = createDashboard({
      pool: db.pool,
      token: token ?? null,
      readOnly: values['read-only'] ?? false,
      hidePayloads: values['hide-payloads'] ?? false,
      requireSignIn: !loopback,
      basePath,
      sagas,
      logger,
    });
    const { createServer } = await import('node:http');
    const server = createServer(dashboard);
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => resolve());
      });
    } catch (error) {
      await dashboard.close();
      await db.close();
      const code = (error as { code?: string }).code;
      throw new UsageError(
        code === 'EADDRINUSE'
          ? `port ${port} on ${host} is in use; pass another --port`
          : `cannot listen on ${host}:${port}: ${(error as Error).message}`,
      );
    }
    const address = server.address();
    const bound = typeof address === 'object' && address !== null ? address.port : port;
    const shown = host.includes(':') ? `[${host}]` : host;
    const listening = `http://${shown}:${bound}${basePath ?? '/'}`;
    const exitCode = new Promise<number>((resolve) => {
      const stop = (signal: NodeJS.Signals) => {
        process.off('SIGTERM', stop);
        process.off('SIGINT', stop);
        logger.info({ reason: 'signal', signal }, 'stopping the dashboard');
        server.closeAllConnections();
        server.close(() => {
          void dashboard
            .close()
            .then(db.close)
            .then(() => resolve(0));
        });
      };
      process.on('SIGTERM', stop);
      process.on('SIGINT', stop);
    });
    logger.info(
      {
        reason: 'dashboard_listening',
        url: listening,
        actions: values['read-only'] ? 'read-only' : token ? 'with token' : 'none (no token)',
        sagas: sagas.map((s) => `${s.name} v${s.version}`),
      },
      `dashboard on ${listening}`,
    );
    return exitCode;
  },
};
