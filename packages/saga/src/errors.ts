import { SkiplockError } from '@skiplock/queue';

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
