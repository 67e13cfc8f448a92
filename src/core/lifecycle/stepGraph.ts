import type { BackfillEvent } from './stateMachine.js';
import type { BackfillState } from '../states.js';

/*
 * The steps of a backfill, declared once. The dispatcher's query (which steps may run now), the claim and the
 * commit checks (may this step run, may it commit), the phase moves (running → replaying → comparing;
 * rolling_back → rolled_back) and what a pause, a stop and a rollback do to steps are all derived from the
 * tables below; nothing else in the code decides them.
 *
 * The life of a step:
 *
 *   pending ──claim (token, lease)──▶ running ──commit──▶ done
 *      ▲                               │  │  └──Slack will never take the message──▶ undeliverable
 *      │                               │  └──retry (attempts left) / lease expired──▶ pending
 *      └──────continue──── blocked ◀───┴──pause caught it running (its writes rolled back)
 *
 *   pending, running, blocked ──stop / cancel / rollback / the backfill failed──▶ skipped
 *   running ──out of attempts──▶ failed
 *
 * The SQL of those derivations (which steps may run, which a phase exit still waits on) is built from these
 * tables in src/db/steps.ts; this file holds no SQL.
 *
 * A claim is a token written by compare-and-set; the step's own transaction checks it (after the backfill's
 * state, under its row lock: together the fence) right before commit, so a second copy of a running step cannot claim it and a worker whose claim was
 * taken over (its lease ran out) or revoked (pause, stop) commits nothing. done, undeliverable, failed and
 * skipped are final.
 */
export const StepStatus = {
  Pending: 'pending',
  Running: 'running',
  Blocked: 'blocked',
  Done: 'done',
  Undeliverable: 'undeliverable',
  Failed: 'failed',
  Skipped: 'skipped',
} as const;
export type StepStatus = (typeof StepStatus)[keyof typeof StepStatus];

const STEP_MOVES: Record<StepStatus, readonly StepStatus[]> = {
  pending: ['running', 'skipped'],
  running: ['done', 'undeliverable', 'pending', 'blocked', 'failed', 'skipped'],
  blocked: ['pending', 'skipped'],
  done: [],
  undeliverable: [],
  failed: [],
  skipped: [],
};

function canMoveStep(from: StepStatus, to: StepStatus): boolean {
  return STEP_MOVES[from].includes(to);
}

/** The statuses a step may be in when it is moved to `to`: the WHERE of every UPDATE that moves steps. */
export function stepStatusesMovableTo(to: StepStatus): StepStatus[] {
  return (Object.keys(STEP_MOVES) as StepStatus[]).filter((from) => canMoveStep(from, to));
}

/** What a step waiting on another counts as finished: an undeliverable message does not hold the run up. */
export const SETTLED: readonly StepStatus[] = ['done', 'undeliverable'];
export const FINAL: readonly StepStatus[] = ['done', 'undeliverable', 'failed', 'skipped'];

export const STEP_KINDS = ['announce', 'stage', 'publish', 'watermark', 'replay', 'compare', 'notify', 'report'] as const;
export type StepKind = (typeof STEP_KINDS)[number];

/** A step belongs to the backfill's run, or to undoing it (its key then ends in "@rollback", or is "rollback"). */
export type StepPhase = 'forward' | 'rollback';

export interface StepRef {
  backfillId: number;
  kind: StepKind;
  key: string;
}

/** What a step waits for besides its backfill's state; each is one SQL predicate over `s` (the step), in src/db/steps.ts. */
export type WaitRule = 'own stage' | 'every stage' | 'earlier waves' | 'every publish' | 'replays depended on' | 'every rollback replay';

interface StepSpec {
  /** The backfill states in which the step may be claimed and may commit. */
  runsIn: readonly BackfillState[];
  waitsFor: readonly WaitRule[];
  /**
   * A pause blocks the steps that write or lead to writing (their claim is revoked; a continue re-runs
   * them); other steps cannot be running during a pause, since none runs in `running`.
   */
  onPause: 'block' | 'not running';
}

// Only the kinds a phase has: a rollback re-triggers, tells and reports; it stages and publishes nothing.
export const STEP_GRAPH: Partial<Record<`${StepKind}:${StepPhase}`, StepSpec>> = {
  'announce:forward': { runsIn: ['announced', 'held', 'approved'], waitsFor: [], onPause: 'not running' },
  'stage:forward': { runsIn: ['running'], waitsFor: [], onPause: 'block' },
  // A partition publishes once it is staged and every earlier wave is published, not once every partition is
  // staged: later hours stage while the canary and the first waves publish (src/core/recompute/waves.ts). A publish
  // by swap too: its catalog window takes the target ACCESS EXCLUSIVE, and a stage by swap holds no lock on the
  // target (it reads the hour's own partition: stagingReads, src/core/recompute/swap.ts). A small hour staged for a
  // rewrite reads through the target, briefly, and a swap's lock tries wait it out.
  'publish:forward': { runsIn: ['running'], waitsFor: ['own stage', 'earlier waves'], onPause: 'block' },
  'watermark:forward': { runsIn: ['running'], waitsFor: ['every stage', 'every publish'], onPause: 'block' },
  'replay:forward': { runsIn: ['replaying'], waitsFor: ['replays depended on'], onPause: 'not running' },
  'compare:forward': { runsIn: ['comparing'], waitsFor: [], onPause: 'not running' },
  'notify:forward': { runsIn: ['done'], waitsFor: [], onPause: 'not running' },
  'report:forward': { runsIn: ['done'], waitsFor: [], onPause: 'not running' },
  'replay:rollback': { runsIn: ['rolling_back'], waitsFor: ['replays depended on'], onPause: 'not running' },
  'notify:rollback': { runsIn: ['rolling_back'], waitsFor: ['every rollback replay'], onPause: 'not running' },
  'report:rollback': { runsIn: ['rolled_back'], waitsFor: [], onPause: 'not running' },
};

/**
 * The phase moves: when every step of the listed kinds (in the listed phase) is settled, the backfill moves on.
 * comparing → done is the compare step's own commit.
 */
export const PHASE_EXITS: readonly { from: BackfillState; event: BackfillEvent; when: readonly StepKind[]; phase: StepPhase }[] = [
  { from: 'running', event: 'replay', when: ['stage', 'publish', 'watermark'], phase: 'forward' },
  { from: 'replaying', event: 'compare', when: ['replay'], phase: 'forward' },
  { from: 'rolling_back', event: 'restore', when: ['replay', 'notify'], phase: 'rollback' },
];

export const ROLLBACK_SUFFIX = '@rollback';

export function phaseOf(ref: Pick<StepRef, 'key'>): StepPhase {
  return ref.key === 'rollback' || ref.key.endsWith(ROLLBACK_SUFFIX) ? 'rollback' : 'forward';
}

export function specOf(ref: Pick<StepRef, 'kind' | 'key'>): StepSpec {
  const spec = STEP_GRAPH[`${ref.kind}:${phaseOf(ref)}`];
  if (!spec) throw new Error(`no ${phaseOf(ref)} step of kind ${ref.kind}`);
  return spec;
}

/** A replay or notify key is the consumer, with "@rollback" when it is part of undoing the backfill. */
export function consumerOf(ref: Pick<StepRef, 'key'>): string {
  return ref.key.split('@')[0] ?? ref.key;
}

/** The step kinds a pause blocks, from the graph. */
export const BLOCKED_BY_PAUSE: readonly StepKind[] = STEP_KINDS.filter((kind) => STEP_GRAPH[`${kind}:forward`]?.onPause === 'block');
