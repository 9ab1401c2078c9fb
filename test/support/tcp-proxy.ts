import { createServer, connect, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's. */
  urlThrough(url: string): string;
  /**
   * Cuts the network without closing anything, like a partition: bytes in either direction, and
   * new connections, wait in the proxy. Queries sent meanwhile neither fail nor complete.
   */
  freeze(): void;
  /**
   * Freezes only the connections whose startup message holds `text` (an application_name, say),
   * as if just those were cut off; `resume()` heals them too.
   */
  freezeConnections(text: string): void;
  /**
   * Cuts the network the other way: every connection through the proxy is reset, and new ones
   * are refused, so queries fail at once instead of hanging.
   */
  sever(): void;
  /** Heals the partition (frozen: everything held back is delivered, in order; severed: new
   * connections get through again). */
  resume(): void;
  /**
   * The next COMMIT a connection sends reaches the server; the server's answer does not: the proxy
   * drops that connection instead, as a network failure right after the server committed would.
   * The client sees its COMMIT fail without knowing that it committed (an ambiguous COMMIT).
   * Resolves once the connection was dropped.
   */
  cutAfterNextCommit(): Promise<void>;
  readonly frozen: boolean;
  /** Bytes held back right now, in both directions. */
  readonly heldBytes: number;
  close(): Promise<void>;
}

/** Most bytes held back while frozen; past it the proxy drops the connection instead. */
const MAX_HELD_BYTES = 16 * 1024 * 1024;

interface Link {
  client: Socket;
  upstream: Socket | null;
  toUpstream: Buffer[];
  toClient: Buffer[];
  /** Drop the link instead of delivering the server's next bytes (see `cutAfterNextCommit`). */
  cutOnReply?: () => void;
  /** The client closed its side during a partition: the server hears of it once it heals. */
  clientEnded?: boolean;
  /** The client's first bytes (its startup message). */
  startup?: string;
  /** Frozen on its own (see `freezeConnections`). */
  frozen?: boolean;
}

/** A COMMIT as node-postgres sends it: a simple-protocol Query message ('Q', length, text). */
const COMMIT_TEXT = Buffer.from('COMMIT\0');
const isCommit = (chunk: Buffer): boolean => {
  const at = chunk.indexOf(COMMIT_TEXT);
  return at >= 5 && chunk[at - 5] === 0x51;
};

/**
 * A TCP proxy in the test process, placed between one worker and PostgreSQL so that a test can
 * cut that worker off from the database (and only that worker) and later let it back.
 */
export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const links = new Set<Link>();
  let frozen = false;
  let severed = false;
  let held = 0;
  let commitCut: (() => void) | null = null;

  const drop = (link: Link) => {
    // Dropped before the COMMIT's answer came (the server hung up, say): cut all the same.
    link.cutOnReply?.();
    link.cutOnReply = undefined;
    links.delete(link);
    for (const chunk of [...link.toUpstream, ...link.toClient]) held -= chunk.length;
    link.toUpstream = [];
    link.toClient = [];
    link.client.destroy();
    link.upstream?.destroy();
  };

  const forward = (link: Link, chunk: Buffer, toUpstream: boolean) => {
    if (toUpstream && commitCut && isCommit(chunk)) {
      link.cutOnReply = commitCut;
      commitCut = null;
    } else if (!toUpstream && link.cutOnReply) {
      drop(link);
      return;
    }
    const queue = toUpstream ? link.toUpstream : link.toClient;
    const out = toUpstream ? link.upstream : link.client;
    if (frozen || link.frozen || !out || queue.length > 0) {
      if (held + chunk.length > MAX_HELD_BYTES) return drop(link);
      held += chunk.length;
      queue.push(chunk);
      return;
    }
    out.write(chunk);
  };

  const flush = (link: Link) => {
    if (link.upstream) {
      for (const chunk of link.toUpstream) link.upstream.write(chunk);
      for (const chunk of link.toUpstream) held -= chunk.length;
      link.toUpstream = [];
    }
    for (const chunk of link.toClient) link.client.write(chunk);
    for (const chunk of link.toClient) held -= chunk.length;
    link.toClient = [];
    if (link.clientEnded && link.upstream) link.upstream.end();
  };

  const openUpstream = (link: Link) => {
    const upstream = connect(target.port, target.host);
    link.upstream = upstream;
    upstream.on('connect', () => {
      if (!frozen && !link.frozen) flush(link);
    });
    upstream.on('data', (chunk: Buffer) => forward(link, chunk, false));
    upstream.on('error', () => drop(link));
    upstream.on('close', () => {
      // The server's side closed: let the client see it once the partition (if any) heals.
      if (frozen || link.frozen) return;
      drop(link);
    });
  };

  // Half-open allowed: a client's close (its FIN) is passed on as bytes are, so during a partition
  // it is not answered, and a client ending its connection waits as it would on a real network.
  const server = createServer({ allowHalfOpen: true }, (client) => {
    if (severed) {
      client.destroy();
      return;
    }
    const link: Link = { client, upstream: null, toUpstream: [], toClient: [] };
    links.add(link);
    client.on('data', (chunk: Buffer) => {
      link.startup ??= chunk.toString('latin1');
      forward(link, chunk, true);
    });
    client.on('end', () => {
      link.clientEnded = true;
      if (!frozen && !link.frozen && link.toUpstream.length === 0) link.upstream?.end();
    });
    client.on('error', () => drop(link));
    client.on('close', () => drop(link));
    // A connection made during a partition reaches the server only when it heals.
    if (!frozen) openUpstream(link);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    port,
    urlThrough(url) {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    freeze() {
      frozen = true;
    },
    freezeConnections(text) {
      for (const link of links) if (link.startup?.includes(text)) link.frozen = true;
    },
    cutAfterNextCommit() {
      return new Promise<void>((resolve) => (commitCut = resolve));
    },
    sever() {
      severed = true;
      for (const link of [...links]) drop(link);
    },
    resume() {
      frozen = false;
      severed = false;
      for (const link of [...links]) {
        link.frozen = false;
        if (!link.upstream) {
          openUpstream(link);
        } else if (link.upstream.destroyed) {
          // The server hung up during the partition; deliver its last words, then hang up too.
          for (const chunk of link.toUpstream) held -= chunk.length;
          link.toUpstream = [];
          flush(link);
          links.delete(link);
          link.client.end();
        } else {
          flush(link);
        }
      }
    },
    get frozen() {
      return frozen;
    },
    get heldBytes() {
      return held;
    },
    async close() {
      for (const link of [...links]) drop(link);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
