import { rememberPeople } from '../db/people.js';
import { z } from 'zod';
import { acknowledge, hold, type GateResult } from '../core/announce/gate.js';
import { storedAnnouncement } from '../core/notices.js';
import { recordingRefusals } from '../core/refusals.js';
import { formatTime } from '../core/time.js';
import { listBackfillConsumers } from '../db/backfills.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { answeredAnnouncementMessage, type ButtonReference } from '../views/blocks.js';
import type { SlackDeps } from './deps.js';
import { heldNotice } from '../views/replies.js';

const buttonValueSchema = z.string().transform((value, issue) => {
  try {
    return JSON.parse(value) as unknown;
  } catch {
    issue.addIssue({ code: 'custom', message: 'not JSON' });
    return z.NEVER;
  }
// The consumer is a catalog name: anything else (a NUL, markup) is no button of the bot's, refused before the database.
}).pipe(z.object({ b: z.number().int().positive(), c: z.string().regex(/^[a-z][a-z0-9_]{0,62}$/) }).transform((v): ButtonReference => ({ backfillId: v.b, consumer: v.c })));

/** The button's reference, or a refusal: a value is never trusted beyond naming what was clicked. */
export function parseButtonValue(value: string | undefined): ButtonReference {
  const parsed = buttonValueSchema.safeParse(value ?? '');
  if (!parsed.success) throw new BackfillError(ErrorCode.BadInput, 'This button does not belong to a backfill announcement; nothing was changed.');
  return parsed.data;
}

export type ButtonAction = 'acknowledge' | 'hold';

/** An owner pressed Acknowledge or Hold. Returns the ephemeral text for the presser when there is one. */
export async function pressButton(deps: SlackDeps, action: ButtonAction, user: string, value: string | undefined, userName?: string): Promise<string | undefined> {
  const reference = parseButtonValue(value);
  const { ctx, messenger } = deps;
  if (userName) await rememberPeople(ctx.pool, [{ slackId: user, name: userName }]);
  const request = { actor: user, action, backfillId: reference.backfillId, input: { consumer: reference.consumer } };
  const result: GateResult = await recordingRefusals(ctx, request, () => action === 'acknowledge'
    ? acknowledge(ctx, { backfillId: reference.backfillId, actor: user, consumer: reference.consumer })
    : hold(ctx, { backfillId: reference.backfillId, actor: user, consumer: reference.consumer }));
  if (!result.changed) return action === 'acknowledge' ? 'Already acknowledged: nothing changed.' : 'Already held: nothing changed.';
  await updateAnnouncement(deps, reference, action === 'acknowledge' ? `:white_check_mark: Acknowledged by <@${user}> at ${formatTime(new Date())}.`
    : `:double_vertical_bar: Held by <@${user}> at ${formatTime(new Date())}. Nothing runs until you acknowledge.`);
  if (action === 'hold') {
    await messenger.postToIncident(reference.backfillId, heldNotice(user, reference.backfillId, reference.consumer));
  }
  if (result.approved) await deps.kick(reference.backfillId);
  await messenger.changed(reference.backfillId);
  return undefined;
}

async function updateAnnouncement(deps: SlackDeps, reference: ButtonReference, answer: string): Promise<void> {
  const consumers = await listBackfillConsumers(deps.ctx.pool, reference.backfillId);
  const row = consumers.find((c) => c.consumer === reference.consumer);
  if (!row?.messageChannel || !row.messageTs) return;
  await deps.messenger.updateMessage(row.messageChannel, row.messageTs, answeredAnnouncementMessage(reference, storedAnnouncement(row), answer));
}
