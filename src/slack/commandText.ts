import { z } from 'zod';
import { commandNames, findCommand, usageOf } from '../commands/table.js';
import { leadingHours } from '../core/time.js';
import { BackfillError, ErrorCode } from '../errors.js';

/** A /backfill invocation, parsed and checked before anything runs. */
export type BackfillCommand =
  | { kind: 'help' }
  | { kind: 'plan'; pipeline: string; target: string; reason: string }
  | { kind: 'start'; pipeline: string; target: string; reason: string }
  | { kind: 'start-plan'; planId: number; reason: string }
  | { kind: 'approve'; backfillId: number }
  | { kind: 'stop'; backfillId: number; reason: string }
  | { kind: 'continue'; backfillId: number; partitions: Date[]; reason: string }
  | { kind: 'rollback'; backfillId: number; reason?: string | undefined }
  | { kind: 'status'; backfillId?: number | undefined }
  | { kind: 'override'; backfillId: number; reason: string }
  | { kind: 'cancel'; backfillId: number; reason?: string | undefined }
  | { kind: 'paid-against'; report?: string | undefined; date: string }
  | { kind: 'sign'; report: string; date: string }
  | { kind: 'log'; backfillId: number };

const backfillId = z.string().regex(/^#?[1-9]\d{0,15}$/, 'is not a backfill id; ids are whole numbers such as 12').transform((id) => Number(id.replace('#', '')));
const word = z.string().min(1);
const date = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'is not a date; write it as YYYY-MM-DD, e.g. 2026-11-15');

const schemas = {
  plan: z.tuple([word, word], word).transform(([pipeline, target, ...reason]) => ({ kind: 'plan' as const, pipeline, target, reason: reason.join(' ') || '(dry run)' })),
  start: z.union([
    z.tuple([z.literal('plan'), backfillId, word], word).transform(([, planId, ...reason]) => ({ kind: 'start-plan' as const, planId, reason: reason.join(' ') })),
    z.tuple([word, word, word], word).transform(([pipeline, target, ...reason]) => ({ kind: 'start' as const, pipeline, target, reason: reason.join(' ') })),
  ]),
  approve: z.tuple([backfillId]).transform(([id]) => ({ kind: 'approve' as const, backfillId: id })),
  stop: z.tuple([backfillId, word], word).transform(([id, ...reason]) => ({ kind: 'stop' as const, backfillId: id, reason: reason.join(' ') })),
  continue: z.tuple([backfillId, word], word).transform(([id, ...words]) => {
    const { hours, rest } = leadingHours(words);
    return { kind: 'continue' as const, backfillId: id, partitions: hours, reason: rest.join(' ') };
  }),
  rollback: z.tuple([backfillId], word).transform(([id, ...reason]) => ({ kind: 'rollback' as const, backfillId: id, reason: reason.join(' ') || undefined })),
  status: z.union([z.tuple([]), z.tuple([backfillId])]).transform((args) => ({ kind: 'status' as const, backfillId: args[0] })),
  override: z.tuple([backfillId, word], word).transform(([id, ...reason]) => ({ kind: 'override' as const, backfillId: id, reason: reason.join(' ') })),
  cancel: z.tuple([backfillId], word).transform(([id, ...reason]) => ({ kind: 'cancel' as const, backfillId: id, reason: reason.join(' ') || undefined })),
  'paid-against': z.union([z.tuple([date]), z.tuple([word, date])]).transform((args) =>
    (args.length === 1 ? { kind: 'paid-against' as const, date: args[0] } : { kind: 'paid-against' as const, report: args[0], date: args[1] })),
  sign: z.tuple([word, date]).transform(([report, day]) => ({ kind: 'sign' as const, report, date: day })),
  log: z.tuple([backfillId]).transform(([id]) => ({ kind: 'log' as const, backfillId: id })),
};

export function parseBackfillCommand(text: string): BackfillCommand {
  const [sub, ...args] = text.trim().split(/\s+/).filter(Boolean);
  if (!sub || sub === 'help') return { kind: 'help' };
  if (!(sub in schemas)) {
    throw new BackfillError(ErrorCode.BadInput, `\`${sub}\` is not a /backfill command. Try one of: help, ${commandNames('slack').join(', ')} (\`/backfill help\` shows examples).`);
  }
  const name = sub as keyof typeof schemas;
  const parsed = schemas[name].safeParse(args);
  if (!parsed.success) {
    const detail = parsed.error.issues.find((issue) => issue.code === 'invalid_format' || issue.code === 'custom');
    const what = detail ? `\`${String(args[Number(detail.path[0] ?? 0)] ?? '')}\` ${detail.message}. ` : 'Missing or extra arguments. ';
    const spec = findCommand(name, 'slack');
    throw new BackfillError(ErrorCode.BadInput, `${what}Usage: \`${spec ? usageOf(spec, 'slack') : `/backfill ${name}`}\``);
  }
  return parsed.data;
}
