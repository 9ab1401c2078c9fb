import { CliError } from './args.js';

const typescriptExtension = /\.(?:ts|mts|cts|tsx)$/;

let registered: Promise<void> | null = null;

/**
 * The CLI is plain JavaScript; a job module written in TypeScript needs tsx's loader. It is
 * registered on first need only, so `skiplock stats` and JavaScript job modules never pay its
 * start-up cost (about 1 s of CPU). tsx is an optional peer dependency: the application's own.
 */
export function prepareImport(path: string): Promise<void> {
  if (!typescriptExtension.test(path)) return Promise.resolve();
  registered ??= (async () => {
    let api: { register(): unknown };
    try {
      api = (await import('tsx/esm/api')) as { register(): unknown };
    } catch {
      registered = null;
      throw new CliError(
        `${path} is TypeScript, and loading it needs tsx: install it beside @skiplock/cli ` +
          '(npm install --save-dev tsx), or compile the module to JavaScript and pass the .js file',
      );
    }
    api.register();
  })();
  return registered;
}
