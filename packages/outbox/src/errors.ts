import { SkiplockError } from '@skiplock/queue';

/** One thing wrong with a message, at a path such as `messages[2].payload.amount`. */
export interface PublishIssue {
  path: string;
  message: string;
}

/**
 * A message `publish` refused: nothing of the call was written, and the caller's transaction is
 * untouched (the check runs before any statement), so the caller may fix the message and go on.
 */
export class InvalidMessageError extends SkiplockError {
  constructor(readonly issues: PublishIssue[]) {
    super(
      'invalid_message',
      `outbox publish refused: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
    );
  }
}
