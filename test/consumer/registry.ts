import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { basename } from 'node:path';

export interface LocalRegistry {
  url: string;
  /** Package names whose metadata npm asked for, in order. */
  requested: string[];
  close(): Promise<void>;
}

interface Published {
  manifest: Record<string, unknown>;
  tarball: Buffer;
  file: string;
}

/**
 * Serves packed tarballs the way a registry does (metadata document per package, tarball by
 * URL), on loopback, so the consumer test installs `@skiplock/saga` by name and version and npm
 * resolves its dependency on `@skiplock/queue` exactly as it would from a real registry. It
 * holds only our packages: everything else comes from the user's configured registry.
 */
export async function startLocalRegistry(tarballs: string[]): Promise<LocalRegistry> {
  const packages = new Map<string, Published>();
  for (const file of tarballs) {
    const manifest = JSON.parse(
      execFileSync('tar', ['-xzOf', file, 'package/package.json'], { encoding: 'utf8' }),
    ) as Record<string, unknown>;
    packages.set(manifest.name as string, { manifest, tarball: readFileSync(file), file });
  }
  const requested: string[] = [];
  let base = '';
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '/').split('?')[0]!.slice(1));
    const tarball = [...packages.values()].find((p) => path === `-/${basename(p.file)}`);
    if (tarball) {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(tarball.tarball);
      return;
    }
    const published = packages.get(path);
    if (!published) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'not found' }));
      return;
    }
    requested.push(path);
    const { manifest, tarball: bytes, file } = published;
    const version = manifest.version as string;
    const document = {
      name: path,
      'dist-tags': { latest: version },
      versions: {
        [version]: {
          ...manifest,
          _id: `${path}@${version}`,
          dist: {
            tarball: `${base}/-/${basename(file)}`,
            shasum: createHash('sha1').update(bytes).digest('hex'),
            integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
          },
        },
      },
    };
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(document));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  base = `http://127.0.0.1:${port}`;
  return {
    url: `${base}/`,
    requested,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
