/**
 * Another copy of @skiplock/queue, as a job's code gets it from a bundle, a nested version or the
 * app beside a globally installed CLI: bundled on its own (bundleForNode), so its classes are not
 * the worker's.
 */
export { NonRetryableError } from '@skiplock/queue';
