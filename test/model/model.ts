// The model: what the engine promised, kept next to the real system while the commands run. It holds no
// guess about how the engine works inside; it records what was asked (people, writers, faults) and what
// the database says happened (a stage, a publish, a rollback), and from that what every partition must hold.
//
// A partition's expected content moves only three ways:
//   a late row is committed        → the row is added (it must survive whatever comes after);
//   a publish of (b, h) commits    → b's staged rows, plus the live rows that arrived after b staged h (late
//                                    rows: not in b's baseline, not produced by b's step);
//   a rollback of b succeeds       → for each partition b published: the rows it replaced, plus every row that
//                                    arrived after b's publish (late rows stay).

import type { RowMap } from '../support/modelSystem.js';

export const RANGES = {
  /** Four hours of night 15: the canary and, with WAVE_SIZE 1 or 2, two or three waves. */
  early: '2026-11-15T05:00..2026-11-15T08:00',
  /** Two of the same hours: a second backfill over them overlaps the first. */
  late: '2026-11-15T07:00..2026-11-15T08:00',
} as const;
export type RangeName = keyof typeof RANGES;

export const GATE_OWNERS = ['U07SETTLE', 'U07PAYOUTS'] as const;
/** An owner in the backfill who is told afterwards: not one who may acknowledge or hold. */
export const AFTER_OWNER = 'U07FORECAST';

export type SettlePolicy = 'continue-named' | 'continue-all' | 'stop';

interface PublishRecord {
  /** Global order of publishes in the run: a later one over the same hour is a later generation. */
  seq: number;
  /** What the partition held right before the publish: every one of these rows must be saved. */
  prior: RowMap;
  /** The keys the publish itself put there (staged and carried): rows arriving after it are late. */
  wrote: Set<string>;
}

export interface ModelBackfill {
  id: number;
  range: RangeName;
  hours: string[];
  /** Model clock when it was started: a source change after this is outside the announced envelope. */
  startedAt: number;
  /** When each partition was staged, and the live keys then (the baseline). */
  staged: Map<string, { at: number; baseline: Set<string> }>;
  published: Map<string, PublishRecord>;
  rolledBack: boolean;
}

export interface Model {
  /** Advances on every command and every job: orders source changes, stages and publishes. */
  clock: number;
  backfills: ModelBackfill[];
  expected: Map<string, RowMap>;
  /** Clock values at which the source of an hour changed. */
  sourceChanges: Map<string, number[]>;
  lateRows: { hour: string; orderId: string; duringPublish: boolean }[];
  publishSeq: number;
  settlePolicy: SettlePolicy;
  /** What happened, for the report of a failing run. */
  journal: string[];
  stats: ModelStats;
}

interface ModelStats {
  jobs: number;
  refusals: number;
  publishes: number;
  rollbacks: number;
  lateRows: number;
  killed: number;
  claimsTaken: number;
  redisEmptied: number;
  /** Actions taken at a publish's seam (a late row, a stop, another job, while the publish waits to commit). */
  seamActions: number;
  /** Late rows written between two statements of a publish or a rollback. */
  statementWrites: number;
}

export function newModel(initial: Map<string, RowMap>, settlePolicy: SettlePolicy): Model {
  return {
    clock: 0,
    backfills: [],
    expected: new Map([...initial].map(([h, rows]) => [h, new Map(rows)])),
    sourceChanges: new Map(),
    lateRows: [],
    publishSeq: 0,
    settlePolicy,
    journal: [],
    stats: { jobs: 0, refusals: 0, publishes: 0, rollbacks: 0, lateRows: 0, killed: 0, claimsTaken: 0, redisEmptied: 0, seamActions: 0, statementWrites: 0 },
  };
}

export function expectedOf(model: Model, hour: string): RowMap {
  let rows = model.expected.get(hour);
  if (!rows) {
    rows = new Map();
    model.expected.set(hour, rows);
  }
  return rows;
}

export function recordLateRow(model: Model, late: { hour: string; orderId: string; row: string; duringPublish: boolean }): void {
  expectedOf(model, late.hour).set(late.orderId, late.row);
  model.lateRows.push({ hour: late.hour, orderId: late.orderId, duringPublish: late.duringPublish });
  model.stats.lateRows += 1;
}

/**
 * A publish of (b, hour) committed. `before` is what the partition held right before the job ran. Late rows
 * written from inside the publish (at its seam) must already be in the model's expected rows: they are carried
 * (not in b's baseline, not staged) but were not there before, so they do not count as what b wrote.
 */
export function recordPublish(model: Model, backfill: ModelBackfill, hour: string, before: RowMap, staged: RowMap): void {
  const baseline = backfill.staged.get(hour)?.baseline ?? new Set<string>();
  const next: RowMap = new Map(staged);
  for (const [key, row] of expectedOf(model, hour)) {
    const late = !baseline.has(key) && !staged.has(key);
    if (late) next.set(key, row);
  }
  const wrote = new Set([...next.keys()].filter((key) => staged.has(key) || before.has(key)));
  model.publishSeq += 1;
  backfill.published.set(hour, { seq: model.publishSeq, prior: new Map(before), wrote });
  model.expected.set(hour, next);
  model.stats.publishes += 1;
}

/** The rollback of b succeeded: each partition it published holds its prior rows again, and later rows. */
export function recordRollback(model: Model, backfill: ModelBackfill): void {
  for (const [hour, publish] of backfill.published) {
    const next: RowMap = new Map(publish.prior);
    // A late row survives the rollback whether it landed before the publish's delete (saved, so restored) or
    // after it (never deleted): another job's seam may have written it at either moment.
    const late = new Set(model.lateRows.filter((row) => row.hour === hour).map((row) => row.orderId));
    for (const [key, row] of expectedOf(model, hour)) {
      if (late.has(key) || (!publish.wrote.has(key) && !publish.prior.has(key))) next.set(key, row);
    }
    model.expected.set(hour, next);
  }
  backfill.rolledBack = true;
  model.stats.rollbacks += 1;
}

/** A later backfill published one of b's partitions and has not been rolled back: b's rollback must be refused. */
export function laterGenerationStanding(model: Model, backfill: ModelBackfill): { backfillId: number; hour: string } | undefined {
  for (const [hour, publish] of backfill.published) {
    for (const other of model.backfills) {
      if (other === backfill || other.rolledBack) continue;
      const theirs = other.published.get(hour);
      if (theirs && theirs.seq > publish.seq) return { backfillId: other.id, hour };
    }
  }
  return undefined;
}

/** The source of the hour changed after b announced its preview and before b staged it: outside the envelope. */
export function sourceChangedInsideWindow(model: Model, backfill: ModelBackfill, hour: string): boolean {
  const stagedAt = backfill.staged.get(hour)?.at;
  if (stagedAt === undefined) return false;
  return (model.sourceChanges.get(hour) ?? []).some((at) => at > backfill.startedAt && at < stagedAt);
}

export function note(model: Model, line: string): void {
  model.journal.push(`[${model.clock}] ${line}`);
}
