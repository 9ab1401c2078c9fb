/** A business outcome, not a fault: retrying cannot help, so the saga compensates at once. */
export class PaymentDeclinedError extends Error {
  readonly code = 'payment_declined';
  constructor(
    readonly invoiceId: string,
    readonly declineCode: string,
  ) {
    super(`payment for invoice ${invoiceId} declined: ${declineCode}`);
    this.name = 'PaymentDeclinedError';
  }
}

/** The provider promised a webhook that never came within the saga's wait. */
export class ConfirmationTimeoutError extends Error {
  readonly code = 'confirmation_timeout';
  constructor(readonly invoiceId: string) {
    super(`payment for invoice ${invoiceId} was not confirmed in time`);
    this.name = 'ConfirmationTimeoutError';
  }
}

/** An invoice the saga was started for is missing or not in the state the step expects. */
export class InvoiceStateError extends Error {
  readonly code = 'invoice_state';
  constructor(message: string) {
    super(message);
    this.name = 'InvoiceStateError';
  }
}
