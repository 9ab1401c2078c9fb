/**
 * A reason the development database cannot start that the user can act on: callers print its
 * message as it is, without a stack trace.
 */
export class DevDatabaseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DevDatabaseError';
  }
}
