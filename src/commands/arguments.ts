import { BackfillError, ErrorCode } from '../errors.js';
import type { Command } from './schemas.js';
import { COMMANDS, findCommand, usageOf, type Surface } from './table.js';

export type { Command } from './schemas.js';

/**
 * Parses a command's words for a surface: the name must be one the surface offers (src/commands/table.ts), and
 * its arguments must fit the command's schema; else a refusal naming the word that is wrong and the usage.
 */
export function parseCommand(surface: Surface, words: readonly string[]): Command {
  const [name, ...args] = words;
  if (!name || name === 'help') return { kind: 'help' };
  const spec = findCommand(name, surface);
  if (!spec) {
    throw new BackfillError(ErrorCode.BadInput, surface === 'slack'
      ? `\`${name}\` is not a /backfill command. Try one of: help, ${offered('slack')} (\`/backfill help\` shows examples).`
      : `"${name}" is not a backfill command. The commands are: ${offered('cli')} (\`backfill help\` says what each does).`);
  }
  const parsed = spec.schema.safeParse(args);
  if (parsed.success) return parsed.data;
  const detail = parsed.error.issues.find((issue) => issue.code === 'invalid_format' || issue.code === 'custom');
  const what = detail ? `\`${String(args[Number(detail.path[0] ?? 0)] ?? '')}\` ${detail.message}. ` : 'Missing or extra arguments. ';
  const usage = usageOf(spec, surface);
  throw new BackfillError(ErrorCode.BadInput, `${what}Usage: ${surface === 'slack' ? `\`${usage}\`` : `backfill ${usage}`}`);
}

function offered(surface: Surface): string {
  return COMMANDS.filter((command) => command.surfaces.includes(surface)).map((command) => command.name).join(', ');
}
