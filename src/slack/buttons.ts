import { z } from 'zod';
import { rememberName, runCommand } from '../commands/run.js';
import { recordingRefusals } from '../core/refusals.js';
import { BackfillError, ErrorCode } from '../errors.js';
import type { ButtonReference } from '../views/blocks.js';
import { jsonText } from './buttonValue.js';
import { slackEffects, type SlackDeps } from './deps.js';

// The consumer is a catalog name: anything else (a NUL, markup) is no button of the bot's, refused before the database.
const buttonValueSchema = jsonText.pipe(z.object({ b: z.number().int().positive(), c: z.string().regex(/^[a-z][a-z0-9_]{0,62}$/) }).transform((v): ButtonReference => ({ backfillId: v.b, consumer: v.c })));

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
  const { ctx } = deps;
  if (userName) await rememberName(ctx, user, userName);
  const { backfillId, consumer } = reference;
  const request = { actor: user, action, backfillId, input: { consumer } };
  const command = action === 'acknowledge' ? { kind: 'ack' as const, backfillId } : { kind: 'hold' as const, backfillId, reason: undefined };
  const facts = await recordingRefusals(ctx, request, () => runCommand(ctx, slackEffects(deps), command, user, { consumer }));
  const changed = (facts.kind === 'ack' || facts.kind === 'hold') && facts.result.changed;
  if (!changed) return action === 'acknowledge' ? 'Already acknowledged: nothing changed.' : 'Already held: nothing changed.';
  return undefined;
}
