import { SkiplockError } from '@skiplock/queue';
import { errorMessage } from '@skiplock/queue/engine';
import type { SagaStatus } from './schema.js';

/** Every saga error carries a stable `code` (from `SkiplockError`). */
export class SagaError extends SkiplockError {}

/** A saga definition breaks a rule (names, step order, options); thrown when it is defined. */
export class SagaDefinitionError extends SagaError {
  constructor(sagaName: string, message: string) {
    super('invalid_saga', `saga "${sagaName}": ${message}`);
  }
}

/** The runtime was asked about a saga name and version it was not given. */
export class UnknownSagaError extends SagaError {
  constructor(
    readonly sagaName: string,
    readonly version: number,
  ) {
    super(
      'unknown_saga',
      `saga "${sagaName}" version ${version} is not registered with this runtime; pass its definition in \`sagas\``,
    );
  }
}

export class SagaNotFoundError extends SagaError {
  constructor(readonly sagaId: string) {
    super('saga_not_found', `saga "${sagaId}" does not exist`);
  }
}

/**
 * `start` was called again with an id that already names a saga of the same definition, but with
 * a different input. The first input stands; the message names no input (inputs may be private).
 */
export class SagaInputMismatchError extends SagaError {
  constructor(
    readonly sagaId: string,
    readonly status: SagaStatus,
  ) {
    super(
      'saga_input_mismatch',
      `saga "${sagaId}" already exists (${status}) with a different input; a start with an existing id must repeat its input, or use a new id`,
    );
  }
}

export interface FieldIssue {
  path: string;
  message: string;
}

/**
 * A saga input or signal payload failed its schema, or a saga id broke the id rule (`invalid_id`);
 * `issues` names every bad field.
 */
export class SagaValidationError extends SagaError {
  constructor(
    code: 'invalid_input' | 'invalid_signal' | 'invalid_id',
    what: string,
    readonly issues: FieldIssue[],
  ) {
    super(code, `invalid ${what}: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`);
  }
}

/** The reason a step's AbortSignal fires when the saga's deadline passes. */
export class SagaDeadlineError extends SagaError {
  constructor(readonly sagaId: string) {
    super('deadline_exceeded', `saga "${sagaId}" passed its deadline`);
  }
}

/**
 * A start of a saga whose definition has `lockKey` and `whenLocked: 'refuse'` found another saga
 * of the definition active with the same key; nothing was written. The message names the holder
 * but not the key (it comes from the input, which may be private).
 */
export class SagaLockedError extends SagaError {
  constructor(
    readonly sagaName: string,
    readonly heldBy: string,
  ) {
    super(
      'saga_locked',
      `saga "${sagaName}": saga "${heldBy}" is active with the same lock key; this definition refuses a second start until it ends`,
    );
  }
}

/**
 * A parent's `cancel()` or `retryFailed()` took effect on the parent (its result is `result`), but
 * the cancel or retry of some of its child sagas or branches threw (`children`, each with its
 * error); the others were done. Calling the same method again tries the children again.
 */
export class ChildSagasError<R> extends SagaError {
  constructor(
    code: 'children_not_cancelled' | 'children_not_retried',
    readonly sagaId: string,
    readonly result: R,
    readonly children: { sagaId: string; error: unknown }[],
  ) {
    const named = children.map((c) => `"${c.sagaId}" (${errorMessage(c.error)})`).join(', ');
    const [done, verb, again] =
      code === 'children_not_cancelled'
        ? ['the cancel is recorded', 'cancelled', 'cancel']
        : ['the retry ran', 'retried', 'retryFailed'];
    super(
      code,
      `saga "${sagaId}": ${done}, but ${children.length === 1 ? 'child saga' : 'child sagas'} ${named} could not be ${verb}; call ${again} again to retry them`,
      {
        cause:
          children.length === 1
            ? children[0]!.error
            : new AggregateError(children.map((c) => c.error)),
      },
    );
  }
}
