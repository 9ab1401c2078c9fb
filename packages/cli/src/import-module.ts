import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CliError, UsageError } from './args.js';
import { prepareImport, requireCommonJs } from './typescript-loader.js';

/**
 * Imports a module named on the command line (TypeScript through tsx, or JavaScript), relative
 * to `cwd`; a missing file is a usage error, one that fails to load a command failure.
 */
export async function importModule(
  specifier: string,
  cwd: string,
): Promise<Record<string, unknown>> {
  const path = resolve(cwd, specifier);
  if (!existsSync(path)) throw new UsageError(`module not found: ${specifier}`);
  await prepareImport(path);
  try {
    const loaded = path.endsWith('.cts')
      ? await requireCommonJs(path)
      : ((await import(pathToFileURL(path).href)) as Record<string, unknown>);
    return namedExports(loaded);
  } catch (error) {
    throw new CliError(`could not load ${specifier}: ${(error as Error)?.message ?? error}`);
  }
}

/**
 * A CommonJS module's exports by name. A `.ts` module of a CommonJS project, compiled by the tsx
 * hooks the CLI registers itself, is imported as `{ default: module.exports }` (Node sees no
 * names in it), so the compiled CLI found no definitions in `export const` ones (found in a
 * newcomer's trial; a CLI started with tsx preloaded sees the names). A default export that is
 * itself a definition or a list stays as it is.
 */
function namedExports(namespace: Record<string, unknown>): Record<string, unknown> {
  const exported = namespace.default;
  const onlyDefault = Object.keys(namespace).every(
    (k) => k === 'default' || k === 'module.exports',
  );
  if (
    !onlyDefault ||
    typeof exported !== 'object' ||
    exported === null ||
    Array.isArray(exported) ||
    'handler' in exported
  ) {
    return namespace;
  }
  return { ...(exported as Record<string, unknown>), ...namespace };
}
