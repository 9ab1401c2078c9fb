export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  env: NodeJS.ProcessEnv;
  cwd: string;
}

export interface Command {
  /** One word, or a group and a word (`jobs list`). */
  name: string;
  summary: string;
  usage: string;
  run(args: string[], io: CliIo): Promise<number>;
}

export function printJson(io: CliIo, value: unknown): void {
  io.stdout(`${JSON.stringify(value, null, 2)}\n`);
}

/**
 * Control characters other than newline and tab, C1 controls included, and the bidirectional
 * formatting characters, as `\uXXXX`. Job errors, names and payloads come from applications and
 * may hold escape sequences that would recolour, retitle or rewrite an operator's terminal, or a
 * right-to-left override that shows a key or an id reversed and spoofed. In JSON the escape is
 * the same string, so `--json` output parses to what was stored.
 */
export function terminalSafe(text: string): string {
  return text.replace(
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * The password of every URL in `text` (`scheme://user:password@`) as `***`. A database URL given
 * where a command wants another argument (`skiplock migrate $DATABASE_URL`) was echoed whole in
 * the error that refused it, password and all, into terminals and CI logs (found by an audit).
 */
export function withoutPasswords(text: string): string {
  // The password runs to the last `@` before the host's path, query or fragment: an unencoded `@`
  // in it is still hidden whole; a `:port/...@` in a path is no password.
  return text.replace(/\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*):[^\s/?#]*@/gi, '$1:***@');
}

/**
 * `io` with both streams passed through `terminalSafe`, and stderr, which echoes arguments, through
 * `withoutPasswords`.
 */
export function terminalSafeIo(io: CliIo): CliIo {
  return {
    ...io,
    stdout: (text) => io.stdout(terminalSafe(text)),
    stderr: (text) => io.stderr(withoutPasswords(terminalSafe(text))),
  };
}

/**
 * Where a long-running command's pino log lines go: `io.stdout`, which the CLI passes through
 * `terminalSafe`. JSON escapes the C0 controls but not C1 controls or the bidirectional formatting
 * characters, which a job's error message (from the application, often from a payload) may hold;
 * written to a terminal as is, they would rewrite or reorder what the operator sees. Escaped, each
 * line is still the same JSON.
 */
export function logDestination(io: CliIo): { write(line: string): void } {
  return { write: (line) => io.stdout(line) };
}
