import { tcpAnswers as answers } from '@skiplock/devdb';

export const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
export const amqpUrl = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/**
 * Whether a broker's tests run. In CI a broker that does not answer fails the run (`.ci/run`
 * starts them first); on a developer's machine without it, its tests report themselves skipped.
 */
export async function brokerAvailable(name: string, url: string, port: number): Promise<boolean> {
  const where = new URL(url);
  where.username = '';
  where.password = '';
  if (await answers(url, port)) return true;
  if (process.env.CI)
    throw new Error(`${name} does not answer at ${where.host}; CI runs these tests for real`);
  console.warn(
    `${name} does not answer at ${where.host}: its tests are skipped (set CI=1 to fail instead)`,
  );
  return false;
}
