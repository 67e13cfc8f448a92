import { z } from 'zod';
import { leadingHours } from '../core/time.js';

// Every command's words after its name, checked by one zod schema shared by the slash command and the CLI:
// `/backfill stop 12 wrong step deployed` and `backfill stop 12 wrong step deployed` parse to the same
// { kind: 'stop', backfillId: 12, reason: 'wrong step deployed' }. The command table (table.ts) pairs each
// command with its schema; the CLI's flags (--wait, --consumer, …) come on top, from node:util parseArgs.

/**
 * The longest reason taken, on every front end. A reason is shown beside the facts in the owner's DM, the status
 * message, the incident notices and the paid-against answer: at 500 characters it has room for a sentence or two
 * (the story belongs in the incident), its own block stays far below a section's 3,000, an override's reason
 * repeated in the gate stays readable, and a message with every fact stays well below the ~13,000 characters at
 * which Slack has refused messages (msg_blocks_too_long).
 */
export const MAX_REASON_LENGTH = 500;

/** The refusal of a reason over MAX_REASON_LENGTH: the limit and the length given. */
export function reasonTooLong(length: number, what = 'The reason'): string {
  return `${what} is ${length} characters long; at most ${MAX_REASON_LENGTH} are taken. Say it in fewer words: the whole story belongs in the incident.`;
}

/** A command's reason within MAX_REASON_LENGTH; refused with reasonTooLong otherwise (an issue with no path: the sentence is the whole answer). */
function reasonWithinLimit<T extends object>(command: T, ctx: z.RefinementCtx<T>): void {
  const reason = 'reason' in command ? command.reason : undefined;
  if (typeof reason === 'string' && reason.length > MAX_REASON_LENGTH) {
    ctx.addIssue({ code: 'custom', message: reasonTooLong(reason.length), input: reason, path: [] });
  }
}

const backfillId = z.string().regex(/^#?[1-9]\d{0,15}$/, 'is not a backfill id; ids are whole numbers such as 12').transform((id) => Number(id.replace('#', '')));
const word = z.string().min(1);
const date = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'is not a date; write it as YYYY-MM-DD, e.g. 2026-11-15');
const optionalReason = (words: string[]) => words.join(' ') || undefined;
// A date that is on the calendar too: 2026-13-01 and 2026-02-30 have the shape and are not days.
const calendarDate = date.refine((day) => {
  const at = Date.parse(`${day}T00:00:00Z`);
  return !Number.isNaN(at) && new Date(at).toISOString().slice(0, 10) === day;
}, 'is not a day of the calendar; write it as YYYY-MM-DD (month 01–12, a day the month has), e.g. 2026-10-01');
const nothing = z.tuple([]);
const idOrNothing = z.union([z.tuple([]), z.tuple([backfillId])]);

export const SCHEMAS = {
  plan: z.tuple([word, word], word).transform(([pipeline, target, ...reason]) => ({ kind: 'plan' as const, pipeline, target, reason: reason.join(' ') || '(dry run)' })).superRefine(reasonWithinLimit),
  start: z.union([
    z.tuple([z.literal('plan'), backfillId, word], word).transform(([, planId, ...reason]) => ({ kind: 'start-plan' as const, planId, reason: reason.join(' ') })),
    z.tuple([word, word, word], word).transform(([pipeline, target, ...reason]) => ({ kind: 'start' as const, pipeline, target, reason: reason.join(' ') })),
  ]).superRefine(reasonWithinLimit),
  ack: z.tuple([backfillId]).transform(([id]) => ({ kind: 'ack' as const, backfillId: id })),
  hold: z.tuple([backfillId], word).transform(([id, ...reason]) => ({ kind: 'hold' as const, backfillId: id, reason: optionalReason(reason) })).superRefine(reasonWithinLimit),
  approve: z.tuple([backfillId]).transform(([id]) => ({ kind: 'approve' as const, backfillId: id })),
  stop: z.tuple([backfillId, word], word).transform(([id, ...reason]) => ({ kind: 'stop' as const, backfillId: id, reason: reason.join(' ') })).superRefine(reasonWithinLimit),
  continue: z.tuple([backfillId, word], word).transform(([id, ...words]) => {
    const { hours, rest } = leadingHours(words);
    return { kind: 'continue' as const, backfillId: id, partitions: hours, reason: rest.join(' ') };
  }).superRefine(reasonWithinLimit),
  rollback: z.tuple([backfillId], word).transform(([id, ...reason]) => ({ kind: 'rollback' as const, backfillId: id, reason: optionalReason(reason) })).superRefine(reasonWithinLimit),
  status: idOrNothing.transform((args) => ({ kind: 'status' as const, backfillId: args[0] })),
  override: z.tuple([backfillId, word], word).transform(([id, ...reason]) => ({ kind: 'override' as const, backfillId: id, reason: reason.join(' ') })).superRefine(reasonWithinLimit),
  cancel: z.tuple([backfillId], word).transform(([id, ...reason]) => ({ kind: 'cancel' as const, backfillId: id, reason: optionalReason(reason) })).superRefine(reasonWithinLimit),
  'paid-against': z.union([z.tuple([date]), z.tuple([word, date])]).transform((args) =>
    (args.length === 1 ? { kind: 'paid-against' as const, date: args[0] } : { kind: 'paid-against' as const, report: args[0], date: args[1] })),
  sign: z.tuple([word, date]).transform(([report, day]) => ({ kind: 'sign' as const, report, date: day })),
  log: idOrNothing.transform((args) => ({ kind: 'log' as const, backfillId: args[0] })),
  signer: z.union([
    z.union([z.tuple([z.literal('list')]), z.tuple([z.literal('list'), word])]).transform((args) => ({ kind: 'signer-list' as const, report: args[1] })),
    z.tuple([z.enum(['add', 'remove']), word, word]).transform(([change, report, user]) => ({ kind: 'signer' as const, change, report, user })),
  ]),
  delegate: z.union([
    z.tuple([z.literal('list')]).transform(() => ({ kind: 'delegate-list' as const })),
    z.tuple([z.enum(['add', 'remove']), word, word]).transform(([change, owner, user]) => ({ kind: 'delegate' as const, change, owner, user })),
  ]),
  export: z.tuple([backfillId]).transform(([id]) => ({ kind: 'export' as const, backfillId: id })),
  costs: z.tuple([calendarDate]).transform(([since]) => ({ kind: 'costs' as const, since })),
  retention: idOrNothing.transform((args) => ({ kind: 'retention' as const, backfillId: args[0] })),
  tick: z.tuple([word]).transform(([pipeline]) => ({ kind: 'tick' as const, pipeline })),
  worker: nothing.transform(() => ({ kind: 'worker' as const })),
  migrate: nothing.transform(() => ({ kind: 'migrate' as const })),
  catalog: z.tuple([z.enum(['plan', 'apply']), word]).transform(([action, file]) => ({ kind: action === 'plan' ? 'catalog-plan' as const : 'catalog-apply' as const, file })),
  lineage: lineageSchema().superRefine(reasonWithinLimit),
};

/**
 * lineage list | confirm <id> as <consumer> [reads <N>h-to-watermark] | confirm <id> <owner> <kind> [name]
 * [reads <N>h-to-watermark] | reject <id> [reason]: an operator's answer to a proposal for an unknown OpenLineage
 * job (src/core/lineage/proposals.ts). `reads` declares the job's read rule: a run that names no hours read the N
 * hours up to the pipeline's watermark at the event's time. One tuple read by hand rather than a union of tuples,
 * so a wrong word is named (a union's failure only says "no option fit"). The owner is a mention (<@U…>, when the
 * command escapes users) or a member id: unescaped, Slack sends "@name".
 */
function lineageSchema() {
  const lineage = 'lineage' as const;
  const kinds = ['report', 'export', 'model'] as const;
  const isKind = (text: string | undefined): text is (typeof kinds)[number] => (kinds as readonly (string | undefined)[]).includes(text);
  return z.tuple([z.enum(['list', 'confirm', 'reject'])], word).transform(([action, ...words], ctx) => {
    const wrong = (index: number, message: string) => {
      // A missing word has nothing to name: the usage line says what is needed.
      ctx.addIssue(words[index - 1] === undefined
        ? { code: 'too_small', origin: 'array', minimum: index + 1, inclusive: true, input: words, message }
        : { code: 'custom', path: [index], message, input: words[index - 1] });
      return z.NEVER;
    };
    if (action === 'list') return words.length === 0 ? { kind: lineage, action } : wrong(1, 'is one word too many');
    const id = words[0] ?? '';
    if (!/^#?[1-9]\d{0,15}$/.test(id)) return wrong(1, 'is not a proposal id; ids are whole numbers such as 3');
    const proposalId = Number(id.replace('#', ''));
    if (action === 'reject') return { kind: lineage, action, proposalId, reason: optionalReason(words.slice(1)) };
    // The read rule closes either form of confirm: `reads` and one word, nothing after.
    const readsAt = words.indexOf('reads', 2);
    const rest = readsAt === -1 ? words : words.slice(0, readsAt);
    let hoursToWatermark: number | undefined;
    if (readsAt !== -1) {
      const rule = /^([1-9]\d{0,2})h-to-watermark$/.exec(words[readsAt + 1] ?? '');
      if (!rule) return wrong(readsAt + 2, 'is not a read rule; write it as <N>h-to-watermark, e.g. 24h-to-watermark (the 24 hours up to the watermark at the event\'s time)');
      if (words.length > readsAt + 2) return wrong(readsAt + 3, 'is one word too many');
      hoursToWatermark = Number(rule[1]);
    }
    if (rest[1] === 'as') {
      return rest[2] && rest.length === 3 ? { kind: lineage, action: 'map' as const, proposalId, consumer: rest[2], hoursToWatermark } : wrong(3, 'needs exactly one consumer name');
    }
    const owner = /^(?:<@([UW][A-Z0-9]+)(?:\|[^>]*)?>|([UW][A-Z0-9]+))$/.exec(rest[1] ?? '');
    if (!owner) return wrong(2, "is not a Slack user id: give the owner's member id, e.g. U07SETTLE (their profile, ⋮, Copy member ID)");
    const consumerKind = rest[2];
    if (!isKind(consumerKind)) return wrong(3, 'is not a consumer kind; write report, export or model');
    if (rest.length > 4) return wrong(5, 'is one word too many');
    return { kind: lineage, action: 'create' as const, proposalId, owner: owner[1] ?? owner[2] ?? '', consumerKind, name: rest[3], hoursToWatermark };
  });
}

/** A command, parsed and checked before anything runs. */
export type Command = z.output<(typeof SCHEMAS)[keyof typeof SCHEMAS]> | { kind: 'help' };
