import { listRecentBackfills } from '../db/backfills.js';
import { cancelBackfill, overrideGate } from '../core/gate.js';
import { planBackfill } from '../core/plan.js';
import { recordingRefusals } from '../core/refusals.js';
import { startBackfill } from '../core/start.js';
import { loadBackfillReport } from '../core/status.js';
import { formatMoney, formatSignedMoney } from '../core/money.js';
import { formatHourRange } from '../core/time.js';
import { HELP_TEXT, paidAgainstMessage, planMessage, statusMessage, type Message } from '../views/blocks.js';
import { answerPaidAgainst } from '../core/paidAgainst.js';
import { signReport } from '../core/signing.js';
import { formatTime } from '../core/time.js';
import { parseBackfillCommand } from './commandText.js';
import type { SlackDeps } from './deps.js';

export interface CommandInput {
  user: string;
  channel: string;
  text: string;
}

const plain = (text: string): Message => ({ text, blocks: [{ type: 'section', text: { type: 'mrkdwn', text } }] });

/**
 * Runs one /backfill invocation and returns the ephemeral reply. Refusals throw a BackfillError (recorded
 * in the timeline); the listener turns it into an ephemeral message.
 */
export async function runBackfillCommand(deps: SlackDeps, input: CommandInput): Promise<Message> {
  const { ctx, policy } = deps;
  const actor = input.user;
  return recordingRefusals(ctx, { actor, action: `/backfill ${input.text.trim().split(/\s+/)[0] ?? ''}`.trim(), input: { text: input.text, channel: input.channel } }, async () => {
    const command = parseBackfillCommand(input.text);
    switch (command.kind) {
      case 'help':
        return plain(HELP_TEXT);
      case 'plan': {
        await policy.requireOperator(actor, input.channel, 'plan a backfill');
        return planMessage(await planBackfill(ctx, { ...command, actor }));
      }
      case 'start': {
        await policy.requireOperator(actor, input.channel, 'start a backfill');
        const { backfill, plan } = await startBackfill(ctx, { ...command, actor, incidentChannel: input.channel });
        await deps.kick(backfill.id);
        await deps.messenger.changed(backfill.id);
        const owners = plan.gateOwners.map((o) => `<@${o}>`).join(', ');
        return plain(`Backfill #${backfill.id} created: ${backfill.partitionCount} partitions, ${formatHourRange(backfill.firstHour, backfill.lastHour)}, ` +
          `total before ${formatMoney(backfill.totalBefore)}. ${owners ? `Announced; it runs once ${owners} acknowledge.` : 'Nobody must acknowledge first: it runs now.'}`);
      }
      case 'status': {
        if (command.backfillId !== undefined) return statusMessage(await loadBackfillReport(ctx.pool, command.backfillId));
        const recent = await listRecentBackfills(ctx.pool, 10);
        return plain(recent.length === 0 ? 'No backfills yet.' : recent.map((b) =>
          `#${b.id} ${b.pipeline} ${formatHourRange(b.firstHour, b.lastHour)}: *${b.state}*${b.diff === null ? '' : `, difference ${formatSignedMoney(b.diff)}`}`).join('\n'));
      }
      case 'override': {
        await policy.requireOperator(actor, input.channel, 'override an acknowledgement');
        const result = await overrideGate(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
        await deps.messenger.postToIncident(command.backfillId, `:warning: <@${actor}> overrode the missing acknowledgements of backfill #${command.backfillId}: ${command.reason}`);
        await deps.kick(command.backfillId);
        await deps.messenger.changed(command.backfillId);
        return plain(result.approved ? `Backfill #${command.backfillId} proceeds without the missing acknowledgements; the timeline keeps your reason.` : 'Nothing was missing: nothing changed.');
      }
      case 'cancel': {
        await policy.requireOperator(actor, input.channel, 'cancel a backfill');
        await cancelBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
        await deps.messenger.postToIncident(command.backfillId, `:no_entry: <@${actor}> cancelled backfill #${command.backfillId}${command.reason ? `: ${command.reason}` : ''}. Nothing was changed.`);
        await deps.messenger.changed(command.backfillId);
        return plain(`Backfill #${command.backfillId} cancelled.`);
      }
      case 'paid-against':
        return paidAgainstMessage(await answerPaidAgainst(ctx.pool, { report: command.report, date: command.date }));
      case 'sign': {
        const signed = await signReport(ctx, { report: command.report, period: command.date, actor });
        return plain(`Signed: ${signed.report} for ${signed.period} = *${formatMoney(signed.total)}* by <@${signed.signedBy}> at ${formatTime(signed.signedAt)}` +
          `${signed.signatureNumber > 1 ? ` (signature ${signed.signatureNumber}; the earlier ones are kept)` : ''}.`);
      }
      case 'log': {
        const where = await deps.messenger.uploadIncidentPackage(command.backfillId);
        return plain(where ? `The incident package of backfill #${command.backfillId} (Markdown and JSON) is in <#${where}>'s incident thread.`
          : `Backfill #${command.backfillId} has no incident channel (it was started from the CLI); export it with \`backfill export ${command.backfillId}\`.`);
      }
      default: {
        const unreachable: never = command;
        return unreachable;
      }
    }
  });
}
