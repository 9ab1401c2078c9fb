import { execFile } from 'node:child_process';

/** True when a Docker engine answers (a client alone is not enough for testcontainers). */
export function dockerAvailable(timeoutMs = 3_000): Promise<boolean> {
  return new Promise((resolve) => {
    execFile(
      'docker',
      ['info', '--format', '{{.ServerVersion}}'],
      { timeout: timeoutMs },
      (error, stdout) => resolve(!error && stdout.trim().length > 0),
    );
  });
}
