export { defineJob, validatePayload } from './define.js';
export type {
  AnyJobDefinition,
  DeadJobInfo,
  JobContext,
  JobDefinition,
  JobDefinitionInput,
  JobInfo,
  JobOptions,
  PayloadOf,
} from './define.js';
export { createClient } from './client.js';
export { isLeaseExpired, isStoppedRunLive } from './lease-state.js';
export { readDatabaseClock } from './clock.js';
export type {
  BulkItem,
  Client,
  ClientOptions,
  EnqueueOptions,
  EnqueueResult,
  Job,
  LockWaitOption,
  QueueStats,
  TransactionOption,
} from './client.js';
export { createWorker } from './worker.js';
export type { StopOptions, Worker, WorkerOptions } from './worker.js';
export { createSweeper } from './sweeper.js';
export type { SweepResult, Sweeper, SweeperOptions } from './sweeper.js';
export { createRetention } from './retention.js';
export { defineSchedule } from './schedule.js';
export type { CatchUp, ScheduleDefinition, ScheduleInput } from './schedule.js';
export {
  createScheduler,
  listSchedules,
  pauseSchedule,
  removeSchedule,
  resumeSchedule,
  scheduleRunState,
} from './scheduler.js';
export type {
  RemoveScheduleOptions,
  ScheduleRunState,
  ScheduleState,
  Scheduler,
  SchedulerOptions,
  SchedulerResult,
} from './scheduler.js';
export { createAdmitter } from './admitter.js';
export type { AdmitResult, Admitter, AdmitterOptions } from './admitter.js';
export type { Retention, RetentionOptions, RetentionResult } from './retention.js';
export { migrate, queueMigrations } from './migrate.js';
export type { MigrateOptions, MigrateResult, MigrationSet } from './migrate.js';
export { computeBackoffMs, defaultBackoff } from './retry/backoff.js';
export type { BackoffOptions } from './retry/backoff.js';
export type { DeadReason, AttemptFailureReason } from './retry/policy.js';
export {
  ConfigError,
  InvalidPayloadError,
  JobTimeoutError,
  LockLostError,
  NonRetryableError,
  PayloadTooLargeError,
  ShutdownError,
  SkiplockError,
  UnknownJobTypeError,
} from './errors.js';
export { createQueueMetrics } from './metrics.js';
export type { JobOutcome, MetricsOption, QueueMetrics } from './metrics.js';
export type { TraceMode, TracingOption } from './tracing.js';
export { createJobGauges } from './gauges.js';
export type { JobGauges, JobGaugesOptions, JobGaugesResult } from './gauges.js';
export type { WorkerEvents, JobEvent, LockLostEvent } from './events.js';
export type { JobStatus } from './schema.js';
export type { Logger } from './logger.js';
export { serveMetrics } from './metrics-server.js';
export type { MetricsServerOptions, MetricsSource } from './metrics-server.js';
