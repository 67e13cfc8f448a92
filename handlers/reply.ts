import { isBackfillError } from '../src/errors.js';

/**
 * The one place a listener's failure becomes words for the person: a refusal (BackfillError) says what was
 * wrong and what would be right; anything else is logged in full and reported without internals.
 */
export function replyForError(error: unknown, log: (message: string) => void): string {
  if (isBackfillError(error)) return error.message;
  log(error instanceof Error ? error.stack ?? error.message : String(error));
  return 'Something went wrong on our side and nothing was changed by this request; the error is in the bot\'s log.';
}
