import type { Job } from './client.js';

type LeaseFields = Pick<Job, 'status' | 'leaseExpiresAt'>;

const millis = (now: Date | number) => (typeof now === 'number' ? now : now.getTime());

/**
 * A run stopped with `cancelJob(id, { running: true })` whose handler has not returned: the job is
 * `cancelled` but keeps its lease, and with it its concurrency slot, until the handler returns or
 * the lease runs out; `retryJob` refuses it meanwhile. `now` is the database's clock where the
 * caller has it (leases are stamped by the server).
 */
export function isStoppedRunLive(job: LeaseFields, now: Date | number): boolean {
  return (
    job.status === 'cancelled' &&
    job.leaseExpiresAt !== null &&
    job.leaseExpiresAt.getTime() > millis(now)
  );
}

/** A `processing` job whose lease has run out: nothing renews it; the sweeper will take it back. */
export function isLeaseExpired(job: LeaseFields, now: Date | number): boolean {
  return (
    job.status === 'processing' &&
    job.leaseExpiresAt !== null &&
    job.leaseExpiresAt.getTime() < millis(now)
  );
}
