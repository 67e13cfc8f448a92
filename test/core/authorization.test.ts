// Who may do what, tested once below both front ends (src/core/authorization.ts): the rules the Slack command
// and the CLI both apply, and what an action taken on someone else's behalf leaves in the timeline.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMANDS, findCommand } from '../../src/commands/table.js';
import { authorize, principalOf, runActing, type Acting, type Rule } from '../../src/core/authorization.js';
import { acknowledge, hold } from '../../src/core/announce/gate.js';
import { addDelegate, signReport } from '../../src/core/finance/signing.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { listEvents } from '../../src/db/events.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR: Acting = { actor: 'U07ONCALL', operator: true };
const VISITOR: Acting = { actor: 'U07VISITOR', operator: false };
const CLI_OPERATOR: Acting = { actor: 'cli:dana@ops-1', operator: true };

function refusal(acting: Acting, rule: Rule, action = 'do it'): string | undefined {
  try {
    authorize(acting, rule, action);
    return undefined;
  } catch (error) {
    expect(isBackfillError(error, ErrorCode.NotAllowed)).toBe(true);
    return (error as Error).message;
  }
}

describe('authorization, the same for every entry point', () => {
  it('lets anyone read, and only operators run the operators\' commands', () => {
    expect(refusal(VISITOR, 'anyone')).toBeUndefined();
    expect(refusal(OPERATOR, 'operator')).toBeUndefined();
    expect(refusal(VISITOR, 'operator', 'stop a backfill')).toBe('<@U07VISITOR> is not a backfill operator, so cannot stop a backfill. ' +
      'Operators are listed in BACKFILL_OPERATORS (Slack users) or BACKFILL_CLI_OPERATORS (OS users of the CLI); ask one of them, or ask to be added.');
    // Owners and signers are checked against the rows by the action itself; nothing is refused up front.
    expect(refusal(VISITOR, 'owner')).toBeUndefined();
    expect(refusal(VISITOR, 'signer')).toBeUndefined();
  });

  it('lets only an operator with a reason act on someone else\'s behalf, with that person\'s rights', () => {
    const forSettle = { ...CLI_OPERATOR, onBehalfOf: 'U07SETTLE' };
    expect(refusal(forSettle, 'owner', 'acknowledge')).toBe('Acting on behalf of <@U07SETTLE> needs a reason, kept in the timeline: add --reason "<why they cannot acknowledge themselves>".');
    expect(refusal({ ...forSettle, reason: '   ' }, 'owner', 'acknowledge')).toMatch(/needs a reason/);
    expect(refusal({ ...forSettle, operator: false, reason: 'asked me' }, 'signer', 'sign a report'))
      .toBe('cli:dana@ops-1 is not an operator, so cannot sign a report on behalf of <@U07SETTLE>. Only an operator may act for someone else; <@U07SETTLE> can do it themselves.');
    expect(refusal({ ...forSettle, reason: 'on a plane' }, 'owner', 'acknowledge')).toBeUndefined();
    expect(principalOf({ ...forSettle, reason: 'on a plane' })).toBe('U07SETTLE');
    expect(principalOf(CLI_OPERATOR)).toBe('cli:dana@ops-1');
  });

  it('has one rule for every command, offered on Slack, the CLI or both', () => {
    const names = COMMANDS.map((c) => c.name);
    expect(new Set(names).size).toBe(names.length);
    for (const name of ['plan', 'start', 'override', 'cancel', 'approve', 'stop', 'continue', 'rollback']) {
      expect(findCommand(name, 'slack')?.rule).toBe('operator');
      expect(findCommand(name, 'cli')?.rule).toBe('operator');
    }
    expect(findCommand('ack', 'cli')?.rule).toBe('owner');
    expect(findCommand('ack', 'slack')).toBeUndefined();
    expect(findCommand('sign', 'slack')?.rule).toBe('signer');
    expect(findCommand('paid-against', 'cli')?.rule).toBe('anyone');
  });
});

describe('an action on someone else\'s behalf, in the timeline', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('names the actor and the person acted for; the gate counts the person acted for', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: 'U07ONCALL' });
    const acting: Acting = { ...CLI_OPERATOR, onBehalfOf: 'U07SETTLE', reason: 'Dana is on a plane' };
    const result = await runActing(acting, () => acknowledge(engine.ctx, { backfillId: backfill.id, actor: principalOf(acting) }));
    expect(result.changed).toBe(true);
    expect(result.waitingFor.map((w) => w.consumer)).toEqual(['payout_export']);
    const acknowledged = (await listEvents(engine.ctx.pool, backfill.id)).filter((e) => e.kind === 'acknowledged');
    expect(acknowledged.map((e) => ({ actor: e.actor, onBehalfOf: e.onBehalfOf, onBehalfReason: e.onBehalfReason }))).toEqual([
      { actor: 'cli:dana@ops-1', onBehalfOf: 'U07SETTLE', onBehalfReason: 'Dana is on a plane' },
    ]);
    // Outside the command, events are the actor's own again.
    await acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07PAYOUTS' });
    const last = (await listEvents(engine.ctx.pool, backfill.id)).filter((e) => e.kind === 'acknowledged').at(-1);
    expect(last).toMatchObject({ actor: 'U07PAYOUTS', onBehalfOf: null, onBehalfReason: null });
  });

  it('owners or their delegates acknowledge and hold, a report\'s signers sign it, and nobody else, from any entry point', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15T12:00..2026-11-15T13:00', reason: 'owner and signer rules', actor: 'U07ONCALL' });
    const notAllowed = (promise: Promise<unknown>) => expect(promise).rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.NotAllowed));
    await notAllowed(acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07VISITOR' }));
    await notAllowed(hold(engine.ctx, { backfillId: backfill.id, actor: 'U07VISITOR' }));
    await addDelegate(engine.ctx, { owner: 'U07SETTLE', delegate: 'U07DEPUTY', actor: 'U07ONCALL' });
    const byDelegate = await acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07DEPUTY', consumer: 'settlement_report' });
    expect(byDelegate.changed).toBe(true);
    await notAllowed(signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-15', actor: 'U07DEPUTY' }));
    const signed = await signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-15', actor: 'U07SETTLE' });
    expect(signed.signedBy).toBe('U07SETTLE');
  });
});
