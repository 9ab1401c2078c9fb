export { defineSaga } from './define.js';
export { sagaGraph, sagaShape } from './graph.js';
export type { SagaShape, SagaShapeEdge, SagaShapeNode, SagaShapeNodeKind } from './graph.js';
export { migrate, sagaMigrations } from './migrate.js';
export type {
  AnySagaDefinition,
  Branch,
  BranchMaker,
  BranchOptions,
  NoOutputs,
  SagaDefinition,
  SagaInput,
  SagaLock,
  SagaOptions,
  SagaOutputs,
  SleepContext,
  SleepDuration,
  WaitOptions,
} from './define.js';
export type {
  CompensationContext,
  ErrorClass,
  RetryPolicy,
  StepContext,
  StepOptions,
  StepOutputs,
} from './step.js';
// The saga tables' grants under skiplock's least-privilege roles (composed by `skiplock roles`).
export { sagaGrants } from './roles.js';
export { createSagaRuntime } from './runtime.js';
export type {
  CancelResult,
  RetryResult,
  SagaActionOptions,
  SagaRuntime,
  SagaRuntimeOptions,
  SignalResult,
  StartOptions,
  StartResult,
} from './runtime.js';
export type {
  Reconciler,
  ReconcilerOptions,
  ReconcileResult,
  UnknownVersionPolicy,
} from './reconciler.js';
export { UNKNOWN_VERSION_POLICIES } from './reconciler.js';
export { createSagaMetrics } from './metrics.js';
export type { SagaMetrics, SagaMetricsOption } from './metrics.js';
// Reads for tools that have no definitions at hand (the CLI); a runtime's getSaga/listSagas wrap them.
export { readSaga, readSagaCounts, readSagaNames, readSagas } from './read.js';
export type {
  SagaCounts,
  SagaList,
  SagaListOptions,
  SagaSummary,
  SagaView,
  SignalRecord,
  StepRecord,
  StrandedJob,
} from './read.js';
export type { FaultHook, FaultPoint } from './engine.js';
export { isSagaJobType, SAGA_JOB_PREFIX, sagaIdOfKey } from './keys.js';
export {
  ChildSagasError,
  SagaDeadlineError,
  SagaDefinitionError,
  SagaError,
  SagaInputMismatchError,
  SagaLockedError,
  SagaNotFoundError,
  SagaValidationError,
  UnknownSagaError,
} from './errors.js';
export type { SagaStatus, SagaStepKind, SagaStepStatus } from './schema.js';
