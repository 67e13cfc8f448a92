// The SQLSTATEs the bot acts on, by the names PostgreSQL gives them (Appendix A, "PostgreSQL Error Codes"). Every
// other error of the server goes on as it is: these are the answers the code has a decision for.

export const SqlState = {
  /** 23503: a row is still referred to (the catalog's removal of a pipeline or consumer the read log names). */
  ForeignKeyViolation: '23503',
  /** 23505: a unique index refused a row (a repeated key in staged rows, a rollback's insert meeting a later write). */
  UniqueViolation: '23505',
  /** 23514: a CHECK refused a row (a staged row outside its hour). */
  CheckViolation: '23514',
  /** 23P01: an exclusion constraint refused a row (two backfills over the same hours). */
  ExclusionViolation: '23P01',
  /** 40001 serialization_failure and 40P01 deadlock_detected: the server asks for the transaction to be tried again. */
  SerializationFailure: '40001',
  DeadlockDetected: '40P01',
  /** 42501: the database role lacks a grant. */
  InsufficientPrivilege: '42501',
  /** 42P04: the database exists already. */
  DuplicateDatabase: '42P04',
  /** 3D000: no database of that name. */
  InvalidCatalogName: '3D000',
  /** 28P01 and 28000: the server refused the login. */
  InvalidPassword: '28P01',
  InvalidAuthorization: '28000',
  /** 55P03: a lock was not granted (NOWAIT, or past lock_timeout). */
  LockNotAvailable: '55P03',
  /** 57014: a statement was cancelled (statement_timeout, or on request). */
  QueryCanceled: '57014',
} as const;
export type SqlState = (typeof SqlState)[keyof typeof SqlState];

/** The SQLSTATE of an error the server sent (pg puts it on `code`), or undefined for any other error. */
export function sqlStateOf(error: unknown): string | undefined {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' ? code : undefined;
}

/** Whether the server answered `error` with one of `states`. */
export function hasSqlState(error: unknown, ...states: SqlState[]): boolean {
  const state = sqlStateOf(error);
  return state !== undefined && (states as string[]).includes(state);
}
