// Model-based test of the status message's buttons, through the real Bolt receiver and the Web API emulator:
// fast-check strings together presses of any button of any rendering of the status message (stale or not), by
// operators and by people who are not, sometimes two at once, with their confirmations submitted or left open,
// the owners' answers in their DMs, and the workers running the steps. The workers run only when a command says
// so, so that between commands nothing moves but what people did. After every command:
//   - no backfill state moved without a row in the timeline naming who moved it (the person who was not refused,
//     or the engine while the steps ran);
//   - a refusal (an ephemeral answer, a refused confirmation, an error on a field) changed no row but the timeline;
//   - the status message's buttons are the actions the state allows, each carrying the state it was rendered for.
//
// Replay a failure:   FC_SEED=<seed> FC_PATH=<path> npx vitest run test/slack/statusActions.model.test.ts
// A longer run:       FC_RUNS=50 FC_TIME_LIMIT_MS=1800000 npx vitest run test/slack/statusActions.model.test.ts
// FC_SHRINK=1 shrinks a failure to its shortest sequence (each run is a few seconds: slow). FC_MAX_COMMANDS (default 10).

import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { OWNERS } from '../../dev/demo/constants.js';
import { runUntilSettled } from '../../src/cli/runner.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { StatusActionId, type StatusAction } from '../../src/views/statusActions.js';
import { createSlackHarness, OPERATOR, type SlackHarness } from '../support/slackApp.js';
import {
  buttonsOf, currentStatus, optionsOf, pressStatus, rowsFingerprint, statusRenderings, submitConfirmation, type Filled, type Modal, type PressOutcome,
  type StatusButton, type SubmitOutcome,
} from './statusActionsDriver.js';

// Tests read the environment directly; only src/ goes through src/config.ts.
const env = (name: string): string | undefined => process.env[name]?.trim() || undefined;
const SEED = Number(env('FC_SEED') ?? Math.floor(Math.random() * 2 ** 31));
const PATH = env('FC_PATH');
// PERF: a run is a harness (a database clone, the emulator, Bolt), its presses and the steps it runs: about a
// second on 2 cores, so ten runs keep the default short; FC_RUNS raises it.
const RUNS = Number(env('FC_RUNS') ?? 10);
const TIME_LIMIT_MS = Number(env('FC_TIME_LIMIT_MS') ?? 60_000);
const MAX_COMMANDS = Number(env('FC_MAX_COMMANDS') ?? 10);
const SHRINK = Boolean(env('FC_SHRINK'));

const LEAD = 'U07LEAD';
const OPERATORS = [OPERATOR, LEAD];
/** Who presses: the two operators (the first asked for the backfill), someone from finance, an owner. */
const PEOPLE = [OPERATOR, LEAD, 'U07VISITOR', OWNERS.settlementLead] as const;
const ENGINE = 'backfill-bot';
const BACKFILL = 1;
const ACTION_OF: Record<string, StatusAction> = Object.fromEntries(Object.entries(StatusActionId).map(([key, id]) => [id, key.toLowerCase() as StatusAction]));

class InvariantViolation extends Error {
  constructor(message: string) {
    super(`INVARIANT: ${message}`);
    this.name = 'InvariantViolation';
  }
}

interface World {
  h: SlackHarness;
  journal: string[];
}
type Model = Record<string, never>;

interface Before {
  fingerprint: string;
  state: string;
  eventId: number;
}

async function before(world: World): Promise<Before> {
  const { rows } = await world.h.engine.ctx.pool.query<{ state: string; eventId: number }>(
    `SELECT state, (SELECT coalesce(max(id), 0)::int FROM backfill.events) AS "eventId" FROM backfill.backfills WHERE id = $1`, [BACKFILL]);
  return { fingerprint: await rowsFingerprint(world.h), state: rows[0]?.state ?? '?', eventId: rows[0]?.eventId ?? 0 };
}

/** What the status message should offer, read from the rows (the issue's table of states), in the order shown. */
async function expectedActions(world: World): Promise<{ state: string; actions: StatusAction[] }> {
  const { rows } = await world.h.engine.ctx.pool.query<{ state: string; needsSecond: boolean; secondGiven: boolean; inBreach: boolean; published: boolean; missing: boolean }>(
    `SELECT b.state, b.needs_second_approval AS "needsSecond",
            EXISTS (SELECT 1 FROM backfill.capacity_approvals a WHERE a.backfill_id = b.id) AS "secondGiven",
            EXISTS (SELECT 1 FROM backfill.backfill_targets t WHERE t.backfill_id = b.id AND t.breach IS NOT NULL) AS "inBreach",
            EXISTS (SELECT 1 FROM backfill.backfill_targets t WHERE t.backfill_id = b.id AND t.status = 'published') AS published,
            EXISTS (SELECT 1 FROM backfill.backfill_consumers c WHERE c.backfill_id = b.id AND c.notify_rule = 'before'
                      AND NOT EXISTS (SELECT 1 FROM backfill.acknowledgements a WHERE a.backfill_id = b.id AND a.consumer = c.consumer)
                      AND NOT EXISTS (SELECT 1 FROM backfill.gate_overrides o WHERE o.backfill_id = b.id AND o.consumer = c.consumer)) AS missing
     FROM backfill.backfills b WHERE b.id = $1`, [BACKFILL]);
  const row = rows[0];
  if (!row) throw new Error('the backfill is gone');
  const { state } = row;
  const offered: Record<StatusAction, boolean> = {
    continue: state === 'paused' && row.inBreach,
    // Offered until a second operator approves (the message names them then) or the gate opens.
    approve: (state === 'announced' || state === 'held') && row.needsSecond && !row.secondGiven,
    override: state === 'announced' && row.missing,
    rollback: ['paused', 'done', 'failed', 'stopped'].includes(state) && row.published,
    stop: ['announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing'].includes(state),
  };
  return { state, actions: (['continue', 'approve', 'override', 'rollback', 'stop'] as const).filter((a) => offered[a]) };
}

/** The three promises, after a command in which `people` (who were not refused) may have moved the backfill. */
async function checkAfter(world: World, was: Before, people: readonly string[], refusal: boolean): Promise<void> {
  const { h } = world;
  const { rows: moves } = await h.engine.ctx.pool.query<{ actor: string; from: string; to: string }>(
    `SELECT actor, detail ->> 'from' AS from, detail ->> 'to' AS to FROM backfill.events
     WHERE backfill_id = $1 AND kind = 'state_changed' AND id > $2 ORDER BY id`, [BACKFILL, was.eventId]);
  let state = was.state;
  for (const move of moves) {
    if (move.from !== state) throw new InvariantViolation(`a move from ${move.from} is recorded while the backfill was ${state}`);
    if (!move.actor || !(move.actor === ENGINE || people.includes(move.actor))) {
      throw new InvariantViolation(`${move.from} → ${move.to} was recorded as moved by "${move.actor}", who was not among those who acted (${people.join(', ') || 'nobody'})`);
    }
    state = move.to;
  }
  const { state: now, actions } = await expectedActions(world);
  if (now !== state) throw new InvariantViolation(`the backfill is ${now}, but the timeline's moves since ${was.state} end at ${state}: a move without a row naming who`);
  if (refusal && (await rowsFingerprint(h)) !== was.fingerprint) throw new InvariantViolation('a refusal changed rows beyond the timeline');
  // Every change re-renders the status message; the steps' own refreshes are not awaited, so wait for the last one.
  await h.bot.messenger.changed(BACKFILL);
  const shown = buttonsOf(await currentStatus(h, BACKFILL));
  const got = shown.map((b) => ACTION_OF[b.actionId]);
  if (JSON.stringify(got) !== JSON.stringify(actions)) throw new InvariantViolation(`the status message offers [${got.join(', ')}] for a ${now} backfill; it should offer [${actions.join(', ')}]`);
  for (const b of shown) {
    const value = JSON.parse(b.value) as { b: number; s: string };
    if (value.b !== BACKFILL || value.s !== now) throw new InvariantViolation(`the ${b.label} button carries ${b.value} on a ${now} backfill`);
  }
}

/** Any button of any rendering so far: `pick` chooses among those that had buttons. */
async function pickButton(world: World, pick: { rendering: number; button: number }): Promise<StatusButton | undefined> {
  const withButtons = (await statusRenderings(world.h, BACKFILL)).map(buttonsOf).filter((b) => b.length > 0);
  const buttons = withButtons[pick.rendering % Math.max(1, withButtons.length)];
  return buttons?.[pick.button % buttons.length];
}

/** Whether the press should be refused: someone who is not an operator, or a button for a state or action the backfill has left. */
async function pressRefused(world: World, who: string, pressed: StatusButton): Promise<boolean> {
  const { state, actions } = await expectedActions(world);
  const value = JSON.parse(pressed.value) as { s: string };
  const action = ACTION_OF[pressed.actionId];
  return !OPERATORS.includes(who) || value.s !== state || action === undefined || !actions.includes(action);
}

/** Whether `who` was refused since `eventId` (every refusal is recorded). */
async function wasRefused(world: World, who: string, eventId: number): Promise<boolean> {
  const { rows } = await world.h.engine.ctx.pool.query(`SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = $1 AND id > $2`, [who, eventId]);
  return rows.length > 0;
}

type ReasonKind = 'valid' | 'blank' | 'too long';
interface Submission {
  reason: ReasonKind;
  /** Which offered partitions are picked, as bits; 0 picks none. */
  partitions: number;
}

function fill(modal: Modal, submission: Submission): Filled {
  const reason = { valid: 'the on-call decided after looking at the reconciliation', blank: ' ', 'too long': 'y'.repeat(501) }[submission.reason];
  return { reason, partitions: optionsOf(modal).filter((_, i) => (submission.partitions >> i) & 1) };
}

const describeOutcome = (outcome: PressOutcome | SubmitOutcome): string => JSON.stringify(outcome).slice(0, 200);

class Press implements fc.AsyncCommand<Model, World> {
  constructor(readonly pick: { rendering: number; button: number }, readonly who: string, readonly submission: Submission | undefined) {}
  check = () => true;
  async run(_model: Model, world: World): Promise<void> {
    const pressed = await pickButton(world, this.pick);
    if (!pressed) {
      world.journal.push(`${this}: no button to press`);
      return;
    }
    const was = await before(world);
    const refusedAtPress = await pressRefused(world, this.who, pressed);
    const outcome = await pressStatus(world.h, pressed, this.who);
    world.journal.push(`${this.who} pressed ${pressed.label} ${pressed.value} (backfill ${was.state}): ${describeOutcome(outcome)}`);
    if ('refused' in outcome !== refusedAtPress) throw new InvariantViolation(`the press was ${'refused' in outcome ? 'refused' : 'let through'}, expected the opposite`);
    if ('refused' in outcome || !this.submission) return checkAfter(world, was, [], 'refused' in outcome);
    const submitted = await submitConfirmation(world.h, outcome.modal, this.who, fill(outcome.modal, this.submission));
    const refused = !('told' in submitted) || await wasRefused(world, this.who, was.eventId);
    world.journal.push(`  and submitted (${this.submission.reason}, partitions ${this.submission.partitions}): ${describeOutcome(submitted)}`);
    return checkAfter(world, was, refused ? [] : [this.who], refused);
  }
  toString = () => `press(${JSON.stringify(this.pick)}, ${this.who}, ${JSON.stringify(this.submission)})`;
}

/** Two operators press the same button at once, and both submit at once. */
class PressTogether implements fc.AsyncCommand<Model, World> {
  constructor(readonly pick: { rendering: number; button: number }) {}
  check = () => true;
  async run(_model: Model, world: World): Promise<void> {
    const pressed = await pickButton(world, this.pick);
    if (!pressed) {
      world.journal.push(`${this}: no button to press`);
      return;
    }
    const was = await before(world);
    const outcomes = await Promise.all(OPERATORS.map((who) => pressStatus(world.h, pressed, who)));
    const opened = OPERATORS.flatMap((who, i) => {
      const outcome = outcomes[i];
      return outcome && 'modal' in outcome ? [{ who, modal: outcome.modal }] : [];
    });
    const submitted = await Promise.all(opened.map(({ who, modal }) => submitConfirmation(world.h, modal, who, fill(modal, { reason: 'valid', partitions: -1 }))));
    world.journal.push(`both operators pressed ${pressed.label} ${pressed.value} (backfill ${was.state}): ${outcomes.map(describeOutcome).join(' / ')}; submitted: ${submitted.map(describeOutcome).join(' / ')}`);
    const through: string[] = [];
    for (const [i, { who }] of opened.entries()) if ('told' in (submitted[i] ?? {}) && !(await wasRefused(world, who, was.eventId))) through.push(who);
    const action = ACTION_OF[pressed.actionId];
    if (through.length > 1 && (action === 'stop' || action === 'continue' || action === 'rollback')) {
      throw new InvariantViolation(`both operators' ${action} went through; the second should find the backfill moved on`);
    }
    return checkAfter(world, was, through, through.length === 0);
  }
  toString = () => `pressTogether(${JSON.stringify(this.pick)})`;
}

/** An owner answers their announcement: Acknowledge or Hold in the DM. */
class Answer implements fc.AsyncCommand<Model, World> {
  constructor(readonly consumer: 'settlement_report' | 'payout_export', readonly hold: boolean) {}
  check = () => true;
  async run(_model: Model, world: World): Promise<void> {
    const was = await before(world);
    const owner = this.consumer === 'settlement_report' ? OWNERS.settlementLead : OWNERS.payouts;
    const { reply } = await world.h.press(this.hold ? ActionId.Hold : ActionId.Acknowledge, encodeButtonValue({ backfillId: BACKFILL, consumer: this.consumer }), owner);
    world.journal.push(`${owner} pressed ${this.hold ? 'Hold' : 'Acknowledge'} (backfill ${was.state}): ${reply ?? 'no reply'}`);
    await checkAfter(world, was, [owner], false);
  }
  toString = () => `${this.hold ? 'hold' : 'acknowledge'}(${this.consumer})`;
}

/** The workers run the steps until the backfill waits for people again or ends. */
class Work implements fc.AsyncCommand<Model, World> {
  check = () => true;
  async run(_model: Model, world: World): Promise<void> {
    const was = await before(world);
    const { h } = world;
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new InvariantViolation(`the steps did not settle within 60 s from ${was.state}`)), 60_000);
    });
    try {
      const report = await Promise.race([runUntilSettled(h.engine.ctx, BACKFILL, () => undefined, h.bot.messenger), bound]);
      world.journal.push(`the workers ran: ${was.state} → ${report.backfill.state}`);
    } finally {
      clearTimeout(timer);
    }
    await checkAfter(world, was, [], false);
  }
  toString = () => 'work';
}

const pick = fc.record({ rendering: fc.nat(), button: fc.nat() });
const submission = fc.option(fc.record({ reason: fc.constantFrom<ReasonKind>('valid', 'valid', 'valid', 'blank', 'too long'), partitions: fc.nat({ max: 3 }) }), { nil: undefined, freq: 4 });
const COMMANDS = [
  fc.tuple(pick, fc.constantFrom(...PEOPLE), submission).map(([p, who, s]) => new Press(p, who, s)),
  fc.tuple(pick, fc.constantFrom(...PEOPLE), submission).map(([p, who, s]) => new Press(p, who, s)),
  pick.map((p) => new PressTogether(p)),
  fc.tuple(fc.constantFrom<'settlement_report' | 'payout_export'>('settlement_report', 'payout_export'), fc.boolean()).map(([c, h]) => new Answer(c, h)),
  fc.constant(null).map(() => new Work()),
];

interface Scenario {
  /** Above the capacity limit: a second operator must approve it. */
  large: boolean;
  /** 07:00 changes upstream after the announcement: its publish pauses the run. */
  breach: boolean;
}

const tally = { runs: 0, commands: 0, states: new Map<string, number>() };

async function runOnce(scenario: Scenario, commands: Iterable<fc.AsyncCommand<Model, World>>): Promise<void> {
  const h = await createSlackHarness({ BACKFILL_OPERATORS: OPERATORS.join(','), ...(scenario.large ? { CAPACITY_LIMIT: '4' } : {}) }, { workers: false });
  const world: World = { h, journal: [] };
  try {
    await h.command('start orders 2026-11-15 currency parsed as text');
    if (scenario.breach) {
      await h.engine.ctx.pool.query(`UPDATE warehouse.orders_raw SET amount_local = amount_local + 50 WHERE event_hour = '2026-11-15T07:00Z'
        AND order_id IN (SELECT order_id FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T07:00Z' ORDER BY order_id LIMIT 2)`);
    }
    await checkAfter(world, await before(world), [], false);
    await fc.asyncModelRun(() => ({ model: {}, real: world }), commands);
    tally.runs += 1;
    tally.commands += world.journal.length;
    const { state } = await expectedActions(world);
    tally.states.set(state, (tally.states.get(state) ?? 0) + 1);
  } catch (error) {
    throw new Error(`${error instanceof Error ? error.message : String(error)}\n  journal:\n    ${world.journal.join('\n    ')}`, { cause: error });
  } finally {
    await h.close();
  }
}

describe('the status message\'s buttons under random presses (model-based, through the real receiver)', () => {
  afterAll(() => {
    console.log(`statusActions model: ${tally.runs} run(s), ${tally.commands} command(s) journalled; final states {${[...tally.states].map(([k, n]) => `${k}: ${n}`).join(', ')}}`);
  });

  it('moves no state without a row naming who, changes nothing on a refusal, and always shows what the state allows', async () => {
    console.log(`statusActions model: FC_SEED=${SEED}${PATH ? ` FC_PATH=${PATH}` : ''} FC_RUNS=${RUNS} (replay a failure with the seed and path it prints)`);
    await fc.assert(
      fc.asyncProperty(fc.record({ large: fc.boolean(), breach: fc.boolean() }), fc.commands(COMMANDS, { maxCommands: MAX_COMMANDS }), runOnce),
      { seed: SEED, ...(PATH ? { path: PATH } : {}), numRuns: RUNS, endOnFailure: !SHRINK, plugins: [fc.interruptAfterTimeLimit(TIME_LIMIT_MS)] },
    );
    expect(tally.runs).toBeGreaterThan(0);
  }, TIME_LIMIT_MS + 120_000);
});
