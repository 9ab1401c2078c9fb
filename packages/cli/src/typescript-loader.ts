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
    type Api = { register(): unknown };
    let apis: Api[];
    try {
      // Both hooks: Node loads a `.ts` file of a CommonJS project (`"type": "commonjs"`, or none:
      // what `npm init -y` writes) as CommonJS, which the ES module hooks alone left to a bare
      // require() ("Cannot require() ES Module … in a cycle"; found in an audit).
      apis = (await Promise.all([import('tsx/cjs/api'), import('tsx/esm/api')])) as Api[];
    } catch {
      registered = null;
      throw new CliError(
        `${path} is TypeScript, and loading it needs tsx: install it beside @skiplock/cli ` +
          '(npm install --save-dev tsx), or compile the module to JavaScript and pass the .js file',
      );
    }
    for (const api of apis) api.register();
  })();
  return registered;
}

/**
 * A `.cts` module's exports, through tsx's own `require`. Imported, Node handed it to its
 * CommonJS loader, whose `require()` of an ES module package (`@skiplock/queue`) under the
 * registered hooks failed on Node 20: the installed CLI said "could not load jobs.cts: Cannot
 * read properties of undefined (reading 'exports')", a bare import "request for './define.js'
 * is not in cache" (found in a trial from the packed tarballs). tsx's `require` loads the module
 * and what it requires. Call `prepareImport` first.
 */
export async function requireCommonJs(path: string): Promise<Record<string, unknown>> {
  const { require } = (await import('tsx/cjs/api')) as {
    require(id: string, fromFile: string): unknown;
  };
  const exported = require(path, import.meta.url);
  return typeof exported === 'object' && exported !== null
    ? (exported as Record<string, unknown>)
    : { default: exported };
}
