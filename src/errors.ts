// The small vocabulary of failures. Each carries a code a caller can switch on and a message a person can act on:
// what was wrong, and what would be right. Slack and the CLI show `message`; jobs map `retryable` to BullMQ.

export const ErrorCode = {
  BadInput: 'bad_input',
  UnknownPipeline: 'unknown_pipeline',
  UnknownBackfill: 'unknown_backfill',
  UnknownConsumer: 'unknown_consumer',
  RangeTooLong: 'range_too_long',
  Overlap: 'backfill_overlap',
  NothingToBackfill: 'nothing_to_backfill',
  NotAllowed: 'not_allowed',
  /** A sender went past a bound (lineage proposals, read rows per hour); details.retryAfterSeconds says when to retry. */
  RateLimited: 'rate_limited',
  WrongState: 'wrong_state',
  Config: 'bad_config',
  Migration: 'migration',
  StepFailed: 'step_failed',
  /** Slack will never take this message (user_not_found, account_inactive, …): a fact, not a retry. */
  Undeliverable: 'undeliverable',
  /** Another worker holds this step's claim, or took it over: this run's writes do not commit. */
  ClaimLost: 'claim_lost',
  /** PostgreSQL cancelled a statement that ran past STATEMENT_TIMEOUT_MS, or waited past LOCK_TIMEOUT_MS for a lock. */
  Timeout: 'timeout',
  /** A statement was cancelled on request: its worker was stopping (or someone ran pg_cancel_backend). */
  Cancelled: 'statement_cancelled',
  /** A configured PostgreSQL or Redis did not answer, or the configured database does not exist. */
  Unreachable: 'service_unreachable',
  /** A port the service was told to listen on (PORT, METRICS_PORT) is held by another process. */
  PortInUse: 'port_in_use',
  /** The connection to PostgreSQL went away mid-command (a restart, pg_terminate_backend, a network cut). */
  ConnectionLost: 'connection_lost',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export class BackfillError extends Error {
  readonly code: ErrorCode;
  /** Worth retrying as is (a webhook that answered 503); false means retrying cannot help. */
  readonly retryable: boolean;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options: { cause?: unknown; retryable?: boolean; details?: Record<string, unknown> } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'BackfillError';
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.details = options.details ?? {};
  }
}

export function isBackfillError(error: unknown, code?: ErrorCode): error is BackfillError {
  return error instanceof BackfillError && (code === undefined || error.code === code);
}

export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}
