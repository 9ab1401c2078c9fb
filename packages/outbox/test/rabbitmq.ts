import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The pids `rabbitmqctl close_connection` takes, of the connections with this `connection_name`. */
export async function connectionsNamed(connectionName: string): Promise<string[]> {
  // `user_provided_name` is newer than some brokers; client_properties is always listed.
  const { stdout } = await run('rabbitmqctl', [
    'list_connections',
    '--quiet',
    '--no-table-headers',
    'pid',
    'client_properties',
  ]);
  return stdout
    .split('\n')
    .filter((line) => line.includes(`{"connection_name","${connectionName}"}`))
    .map((line) => line.split('\t')[0]!);
}

/** Has the broker close a connection, as an operator (or a broker restart) would. */
export async function closeConnection(pid: string, reason: string): Promise<void> {
  await run('rabbitmqctl', ['close_connection', pid, reason]);
}
