import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CliError, UsageError } from './args.js';
import { prepareImport } from './typescript-loader.js';

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
    return (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (error) {
    throw new CliError(`could not load ${specifier}: ${(error as Error)?.message ?? error}`);
  }
}
