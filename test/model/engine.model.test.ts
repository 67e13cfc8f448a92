// Model-based test of the step engine over the real PostgreSQL and queue backend (Redis, or BullMQ in PostgreSQL): fast-check strings together people,
// workers, Redis, Slack and other writers in random order, then lets the run settle and checks what the engine
// promised. See test/model/model.ts for what the model tracks, checks.ts for the promises.
//
// Replay a failure:   FC_SEED=<seed> FC_PATH=<path> npx vitest run test/model/engine.model.test.ts
// A longer local run: FC_RUNS=500 FC_TIME_LIMIT_MS=900000 npx vitest run test/model/engine.model.test.ts
// FC_NO_SHRINK=1 reports the first failure as found (shrinking replays whole runs, ~0.5 s each).
// FC_MAX_COMMANDS (default 15) lengthens the random part. In a counterexample, "first" and "second" are the
// backfills in order of start (ids #1 and #2 in the journal), and rollbackAfter 0 / 1 names one of them.

import fc from 'fast-check';
import { afterAll, describe, it } from 'vitest';
import { checkSettled, type FinalReport } from './checks.js';
import { modelCommands, overrideModelGate, rollbackModelBackfill, startModelBackfill } from './commands.js';
import { newModel, type Model, type RangeName, type SettlePolicy } from './model.js';
import { settle } from './settle.js';
import { closeModelSystems, createModelSystem, dayRows, type ModelSystem, type ModelTarget } from '../support/modelSystem.js';

// Tests read the environment directly; only src/ goes through src/config.ts.
const env = (name: string): string | undefined => process.env[name]?.trim() || undefined;
const SEED = Number(env('FC_SEED') ?? Math.floor(Math.random() * 2 ** 31));
const PATH = env('FC_PATH');
// PERF: a run costs ~0.45 s alone on 2 cores (its database clone overlaps the run before; ~13 jobs through
// the real processor, plus the model's reads and checks), ~0.6 s next to the other test files. 150 runs fit
// the 100 s budget; a slower machine stops at the time limit, which is not a failure (it says how many ran).
const RUNS = Number(env('FC_RUNS') ?? 150);
const TIME_LIMIT_MS = Number(env('FC_TIME_LIMIT_MS') ?? 100_000);
const SHRINK = !env('FC_NO_SHRINK');
const MAX_COMMANDS = Number(env('FC_MAX_COMMANDS') ?? 15);

interface Scenario {
  firstRange: RangeName;
  waveSize: number;
  /** warehouse.orders as one table (publish by rewrite) or partitioned by hour (publish by swap). */
  target: ModelTarget;
  /**
   * Every hour small (SWAP_MIN_ROWS above the night's hours, as the default is in production): staged in the
   * store's shared tables, in runs of SMALL_HOUR_BATCH 3, and published by rewrite on either target. Otherwise
   * every hour is staged in tables of its own (and swapped in, on the partitioned target).
   */
  smallHours: boolean;
  settlePolicy: SettlePolicy;
  /** An operator overrides the first backfill's gate right after starting it, so the random part sees it run. */
  overrideAtOnce: boolean;
  /** Once everything settled, an operator rolls back this backfill (by order of start), and it settles again. */
  rollbackAfter: number | undefined;
}

const scenario: fc.Arbitrary<Scenario> = fc.record({
  firstRange: fc.constantFrom<RangeName>('early', 'late'),
  waveSize: fc.constantFrom(1, 2),
  target: fc.constantFrom<ModelTarget>('plain', 'partitioned'),
  smallHours: fc.boolean(),
  settlePolicy: fc.constantFrom<SettlePolicy>('continue-named', 'continue-all', 'stop'),
  overrideAtOnce: fc.boolean(),
  rollbackAfter: fc.option(fc.constantFrom(0, 1), { nil: undefined }),
});

const tally = {
  runs: 0, ms: 0, settleJobs: 0, targets: new Map<string, number>(), retried: new Map<string, number>(), outcomes: new Map<string, number>(), paidAgainst: new Map<string, number>(), events: new Map<string, number>(),
};
/** Timeline events that show which paths the runs took (pauses, takeovers, fenced writes, undeliverable owners…). */
const TELLING_EVENTS = ['paused', 'continued', 'step_blocked', 'claim_lost', 'write_fenced', 'late_rows_kept', 'rolled_back', 'refused', 'failed', 'step_retried', 'undeliverable', 'stopped', 'cancelled'];
const bump = (map: Map<string, number>, key: string, by = 1) => map.set(key, (map.get(key) ?? 0) + by);
const totals: Record<string, number> = {};

/** What a passing run did, for the summary printed at the end (which paths the runs actually took). */
async function tallyRun(model: Model, system: ModelSystem, report: FinalReport, ms: number, settleJobs: number): Promise<void> {
  tally.runs += 1;
  tally.ms += ms;
  tally.settleJobs += settleJobs;
  bump(tally.targets, `${system.target}${system.smallHours ? ' (small hours)' : ''}`);
  for (const state of Object.values(report.states)) bump(tally.outcomes, state);
  bump(tally.paidAgainst, report.paidAgainst.split(' ')[0] ?? '');
  for (const [key, value] of Object.entries(model.stats)) totals[key] = (totals[key] ?? 0) + value;
  const { rows } = await system.ctx.pool.query<{ kind: string; n: number }>(
    `SELECT CASE WHEN kind <> 'step_started' THEN kind WHEN (detail ->> 'takeover')::boolean THEN 'takeover' ELSE 'staged with another' END AS kind, count(*)::int AS n
     FROM backfill.events
     WHERE kind = ANY ($1::text[]) OR (kind = 'step_started' AND ((detail ->> 'takeover')::boolean OR detail ? 'with')) GROUP BY 1`, [TELLING_EVENTS]);
  for (const row of rows) bump(tally.events, row.kind, row.n);
  const { rows: retried } = await system.ctx.pool.query<{ why: string; n: number }>(
    `SELECT left(detail ->> 'error', 60) AS why, count(*)::int AS n FROM backfill.events WHERE kind = 'step_retried' GROUP BY 1`);
  for (const row of retried) bump(tally.retried, `${system.target}: ${row.why}`, row.n);
}

/**
 * One run: a fresh database and queue prefix, the first backfill, the random commands, then the people and
 * workers settle it (and, if the scenario says so, a rollback and another settle), then the final checks.
 */
async function runOnce(setup: Scenario, commands: Iterable<fc.AsyncCommand<Model, ModelSystem>>): Promise<void> {
  const started = Date.now();
  const system = await createModelSystem({ waveSize: setup.waveSize, target: setup.target, smallHours: setup.smallHours });
  try {
    const model = newModel(await dayRows(system.ctx.pool), setup.settlePolicy);
    try {
      await startModelBackfill(model, system, setup.firstRange);
      if (setup.overrideAtOnce && model.backfills[0]) await overrideModelGate(model, system, model.backfills[0], true);
      await fc.asyncModelRun(() => ({ model, real: system }), commands);
      let settled = await settle(model, system);
      const rollBack = setup.rollbackAfter === undefined ? undefined : model.backfills[setup.rollbackAfter];
      if (rollBack) {
        await rollbackModelBackfill(model, system, rollBack);
        const again = await settle(model, system);
        settled = { jobs: settled.jobs + again.jobs, ms: settled.ms + again.ms };
      }
      await system.settlePending();
      await tallyRun(model, system, await checkSettled(model, system), Date.now() - started, settled.jobs);
    } catch (error) {
      // The journal says what the engine did with the commands fast-check prints.
      const journal = model.journal.slice(-60).join('\n    ');
      throw new Error(`${error instanceof Error ? error.message : String(error)}\n  journal (last 60 lines):\n    ${journal}`, { cause: error });
    }
  } finally {
    await system.close();
  }
}

describe('the step engine under random interleavings (model-based, real PostgreSQL and queues)', () => {
  afterAll(async () => {
    await closeModelSystems();
    const outcomes = [...tally.outcomes].map(([k, n]) => `${k}: ${n}`).join(', ');
    console.log(`model: ${tally.runs} run(s), ${(tally.ms / Math.max(1, tally.runs)).toFixed(0)} ms each on average, ` +
      `${(tally.settleJobs / Math.max(1, tally.runs)).toFixed(1)} jobs to settle; targets {${[...tally.targets].map(([k, n]) => `${k}: ${n}`).join(', ')}}; final states {${outcomes}}; ` +
      `paid-against ${[...tally.paidAgainst].map(([k, n]) => `${k}: ${n}`).join(', ')}; totals ${JSON.stringify(totals)}; ` +
      `events ${[...tally.events].map(([k, n]) => `${k}: ${n}`).join(', ')}; steps retried because ${[...tally.retried].map(([k, n]) => `${k} (${n})`).join('; ') || 'none'}`);
  });

  it('finishes every backfill, loses no row, publishes nothing unaccepted outside its envelope, and says the right figure', async () => {
    console.log(`model: FC_SEED=${SEED}${PATH ? ` FC_PATH=${PATH}` : ''} FC_RUNS=${RUNS} (replay a failure with the seed and path it prints)`);
    await fc.assert(
      fc.asyncProperty(scenario, fc.commands([modelCommands], { maxCommands: MAX_COMMANDS }), runOnce),
      {
        seed: SEED,
        ...(PATH ? { path: PATH } : {}),
        numRuns: RUNS,
        endOnFailure: !SHRINK,
        plugins: [fc.interruptAfterTimeLimit(TIME_LIMIT_MS)],
      },
    );
  }, TIME_LIMIT_MS + 120_000);
});
