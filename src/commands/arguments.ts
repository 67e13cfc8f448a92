import { BackfillError, ErrorCode } from '../errors.js';
import { MAX_REASON_LENGTH, reasonTooLong, type Command } from './schemas.js';
import { codePointLabel, firstUnstorable, typedText } from '../markup.js';
import { COMMANDS, findCommand, usageOf, type Surface } from './table.js';

export type { Command } from './schemas.js';

/**
 * Parses a command's words for a surface: the name must be one the surface offers (src/commands/table.ts), and
 * its arguments must fit the command's schema; else a refusal naming the word that is wrong and the usage.
 */
export function parseCommand(surface: Surface, words: readonly string[]): Command {
  words.forEach((word, index) => refuseUnstorable(word, `word ${index + 1} of the command`));
  const [name, ...args] = words;
  if (!name || name === 'help') return { kind: 'help' };
  const spec = findCommand(name, surface);
  if (!spec) {
    throw new BackfillError(ErrorCode.BadInput, surface === 'slack'
      ? `\`${typedText(name)}\` is not a /backfill command. Try one of: help, ${offered('slack')} (\`/backfill help\` shows examples).`
      : `"${typedText(name)}" is not a backfill command. The commands are: ${offered('cli')} (\`backfill help\` says what each does).`);
  }
  const parsed = spec.schema.safeParse(args);
  if (parsed.success) return parsed.data;
  const detail = parsed.error.issues.find((issue) => issue.code === 'invalid_format' || issue.code === 'custom');
  // An issue with no path is about the whole command (a reason too long): its message is the sentence.
  const what = !detail ? 'Missing or extra arguments. '
    : detail.path.length === 0 ? `${detail.message} `
    : `\`${typedText(String(args[Number(detail.path[0] ?? 0)] ?? ''))}\` ${detail.message}. `;
  const usage = usageOf(spec, surface);
  throw new BackfillError(ErrorCode.BadInput, `${what}Usage: ${surface === 'slack' ? `\`${usage}\`` : `backfill ${usage}`}`);
}

function offered(surface: Surface): string {
  return COMMANDS.filter((command) => command.surfaces.includes(surface)).map((command) => command.name).join(', ');
}

/**
 * Refuses text that cannot be stored or shown before anything reaches the database: PostgreSQL refuses NUL in
 * text and a lone surrogate in JSON (which answered "Something went wrong"), and other control characters are
 * never part of a reason or a name (an ESC rewrites a terminal, a bidi override makes a line read otherwise).
 */
function refuseUnstorable(text: string, where: string): void {
  const at = firstUnstorable(text);
  if (at < 0) return;
  throw new BackfillError(ErrorCode.BadInput, `Character ${at + 1} of ${where} is ${codePointLabel(text, at)}, a control character or half of a UTF-16 pair, which is not text: ` +
    'type it again without it. Nothing was changed.');
}

/** The CLI's flags that carry a reason: refused beyond MAX_REASON_LENGTH like a command's reason. */
const REASON_FLAGS = ['reason', 'override-limit'] as const;

/**
 * The CLI's --flags checked as the command's words are: no control characters or lone surrogates, and a reason
 * (--reason, --override-limit) no longer than MAX_REASON_LENGTH.
 */
export function checkFlags(values: Readonly<Record<string, unknown>>): void {
  for (const [flag, value] of Object.entries(values)) {
    if (typeof value !== 'string') continue;
    refuseUnstorable(value, `--${flag}`);
    if ((REASON_FLAGS as readonly string[]).includes(flag) && value.length > MAX_REASON_LENGTH) {
      throw new BackfillError(ErrorCode.BadInput, reasonTooLong(value.length, `The reason of --${flag}`));
    }
  }
}
