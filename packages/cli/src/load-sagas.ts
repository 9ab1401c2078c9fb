import type { AnySagaDefinition } from '@skiplock/saga';
import { UsageError } from './args.js';
import { importModule } from './import-module.js';

function looksLikeSaga(value: unknown): value is AnySagaDefinition {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return (
    typeof v.name === 'string' &&
    typeof v.version === 'number' &&
    Array.isArray(v.steps) &&
    typeof v.step === 'function' &&
    typeof v.waitFor === 'function'
  );
}

/**
 * Imports a module (TypeScript or JavaScript) and collects the saga definitions it exports: by
 * name, as the default export, or in exported arrays. A function export (a factory) is not
 * called: the module must export the definition itself.
 */
export async function loadSagaModule(specifier: string, cwd: string): Promise<AnySagaDefinition[]> {
  const exports = await importModule(specifier, cwd);
  const found = new Set<AnySagaDefinition>();
  for (const value of Object.values(exports)) {
    for (const item of Array.isArray(value) ? value : [value]) {
      if (looksLikeSaga(item)) found.add(item);
    }
  }
  if (found.size === 0) {
    throw new UsageError(`${specifier} exports no saga definitions (made with defineSaga)`);
  }
  return [...found];
}
