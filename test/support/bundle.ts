import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll } from 'vitest';

interface EsbuildApi {
  build(options: Record<string, unknown>): Promise<{ errors: unknown[] }>;
}

// esbuild comes with tsx (a root dev dependency); resolving it from there avoids a second copy.
function loadEsbuild(): EsbuildApi {
  const fromHere = createRequire(import.meta.url);
  return createRequire(fromHere.resolve('tsx/package.json'))('esbuild') as EsbuildApi;
}

const bundles = new Map<string, Promise<string>>();
let outDir: Promise<string> | null = null;

afterAll(async () => {
  if (outDir) await rm(await outDir, { recursive: true, force: true });
});

/**
 * Bundles a TypeScript entry (and the workspace sources it imports) into one ES module that plain
 * `node` runs. A process started through tsx's loader spends about two seconds of CPU compiling
 * and resolving before it does anything; the crash tests start dozens of worker processes on two
 * cores, so they bundle once per test file and start each process in a fraction of that.
 */
export function bundleForNode(entry: URL): Promise<string> {
  const key = entry.href;
  let bundle = bundles.get(key);
  if (!bundle) {
    bundle = (async () => {
      outDir ??= mkdtemp(join(tmpdir(), 'skiplock-bundle-'));
      const outfile = join(await outDir, `${bundles.size}-${entry.pathname.split('/').pop()}.mjs`);
      await loadEsbuild().build({
        entryPoints: [fileURLToPath(entry)],
        outfile,
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node20',
        // The workspace packages' TypeScript sources (see vitest.config.ts), not their builds.
        conditions: ['skiplock-source'],
        logLevel: 'warning',
        // pg loads its optional native binding only when asked to; it is not installed.
        external: ['pg-native'],
        // Bundled CommonJS dependencies (pg, pino) still call require() for Node's built-ins.
        banner: {
          js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
        },
      });
      return outfile;
    })();
    bundles.set(key, bundle);
  }
  return bundle;
}
