import { createHash } from 'node:crypto';
import type { BackfillRow } from '../../db/backfills.js';
import { findFrozenCatalog, listFrozenCatalogs, readRunCatalog, recordFrozenCatalog, type FrozenCatalog, type RunCatalog } from '../../db/frozenCatalog.js';
import type { Queryable } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { Plan } from '../identify/plan.js';
import { catalogChangedSentence } from './catalogPause.js';
import { freezeEscalationPaths } from '../announce/escalation.js';

export { catalogChangedSentence, isCatalogPause } from './catalogPause.js';

// A backfill runs what was previewed and acknowledged, not the catalog of the moment. The engine reads its
// pipeline's step query, shard rule and target (the table, its partition, key and measure columns) at every
// stage and publish, and each consumer's re-trigger at its replay, so a catalog changed mid-run would publish a
// step nobody announced, reconcile and replace rows by another key, sum another column than the announced
// figures, leave every hour "unavailable" and end the backfill done with nothing corrected, or call a consumer
// in a way its owner never saw. So `start` freezes exactly those fields with the backfill (a hash per field:
// enough to name what changed, without a second copy of SQL or of a re-trigger's URL), `catalog apply` refuses
// to change them while it is in flight (apply.ts), and before a stage, publish or replay, the engine compares
// them with the live catalog and pauses on a difference (src/core/lifecycle/catalogGuard.ts).
//
// A consumer's escalation path is frozen by value instead: start copies it into the backfill's own rows
// (src/core/announce/escalation.ts), which the escalation reads from then on. A catalog change to a path is then
// neither refused nor a reason to pause: the running backfill keeps the path it started with, the next one
// takes the new one.

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** JSON with object keys sorted, so jsonb's own key order is no difference. */
function canonical(value: unknown): string {
  return JSON.stringify(value ?? null, (_key, item: unknown) => (item !== null && typeof item === 'object' && !Array.isArray(item)
    ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
    : item));
}

const RETRIGGER = 'retrigger:';

/** A re-trigger's hash as its field holds it: what a replay compares the definition it is about to call with. */
const retriggerHash = (retrigger: unknown) => sha256(canonical(retrigger));

/**
 * Each frozen field's hash, by field: step, sourceShards, shardsExpected, targetTable, partitionColumn,
 * keyColumns, measureColumn, retrigger:<consumer>.
 */
function fieldHashesOf(fields: RunCatalog): Record<string, string> {
  const hashes: Record<string, string> = {
    step: sha256(canonical(fields.stepSql)), sourceShards: sha256(canonical(fields.sourceShardsSql)), shardsExpected: sha256(canonical(fields.shardsExpected)),
    targetTable: sha256(canonical(fields.targetTable)), partitionColumn: sha256(canonical(fields.partitionColumn)),
    keyColumns: sha256(canonical(fields.keyColumns)), measureColumn: sha256(canonical(fields.measureColumn)),
  };
  for (const { consumer, retrigger } of fields.retriggers) hashes[`${RETRIGGER}${consumer}`] = retriggerHash(retrigger);
  return hashes;
}

export function catalogHashOf(fieldHashes: Record<string, string>): string {
  return sha256(canonical(fieldHashes));
}

/** The target's fields, by their key and as the catalog file's reader calls them. */
const TARGET_FIELDS = [['targetTable', 'target table'], ['partitionColumn', 'partition column'], ['keyColumns', 'key columns'], ['measureColumn', 'measure column']] as const;

/**
 * The fields that differ, as people call them: step query, shard rule, target table, partition column, key
 * columns, measure column, re-trigger of <consumer>.
 */
function changedFields(frozen: Record<string, string>, live: Record<string, string>): string[] {
  const differs = (key: string) => frozen[key] !== live[key];
  const retriggers = [...new Set([...Object.keys(frozen), ...Object.keys(live)])]
    .filter((key) => key.startsWith(RETRIGGER) && differs(key)).sort().map((key) => `re-trigger of ${key.slice(RETRIGGER.length)}`);
  return [
    ...(differs('step') ? ['step query'] : []),
    ...(differs('sourceShards') || differs('shardsExpected') ? ['shard rule'] : []),
    ...TARGET_FIELDS.filter(([key]) => differs(key)).map(([, name]) => name),
    ...retriggers,
  ];
}

/**
 * Inside start's transaction, once the backfill's readers are rows: records the fields the plan previewed and
 * announced, and copies the readers' escalation paths. Refused, nothing started, when the catalog no longer holds them (an apply landed between the
 * plan and this transaction): what would run is then not what was previewed.
 */
export async function freezeCatalog(tx: Queryable, backfillId: number, plan: Pick<Plan, 'pipeline' | 'readers'>): Promise<void> {
  const { pipeline } = plan;
  const announced = fieldHashesOf({
    stepSql: pipeline.stepSql, sourceShardsSql: pipeline.sourceShardsSql, shardsExpected: pipeline.shardsExpected,
    targetTable: pipeline.targetTable, partitionColumn: pipeline.partitionColumn, keyColumns: pipeline.keyColumns, measureColumn: pipeline.measureColumn,
    retriggers: plan.readers.map((reader) => ({ consumer: reader.consumer, retrigger: reader.retrigger })),
  });
  const changed = changedFields(announced, fieldHashesOf(await readRunCatalog(tx, backfillId, pipeline.name)));
  if (changed.length > 0) {
    throw new BackfillError(ErrorCode.WrongState,
      `The catalog of ${pipeline.name} changed while this backfill was being started (${changed.join(', ')}): nothing was started. ` +
      'Start it again: it previews and announces what the catalog says now.', { details: { changed } });
  }
  await recordFrozenCatalog(tx, backfillId, catalogHashOf(announced), announced);
  await freezeEscalationPaths(tx, backfillId);
}

/**
 * The frozen fields that the live catalog no longer holds; none when they are all the same. Only the fields the
 * backfill froze are compared: one started before a field was frozen (the target's columns came after the step,
 * shard rule and re-triggers) is held to what it announced then, not paused for a field it never recorded.
 */
async function changesSince(db: Queryable, frozen: FrozenCatalog, options: { lock?: boolean } = {}): Promise<string[]> {
  const live = Object.fromEntries(Object.entries(fieldHashesOf(await readRunCatalog(db, frozen.backfillId, frozen.pipeline, options)))
    .filter(([field]) => field in frozen.fieldHashes));
  if (catalogHashOf(live) === frozen.hash) return [];
  const changed = changedFields(frozen.fieldHashes, live);
  return changed.length > 0 ? changed : ['its frozen fields'];
}

export interface FrozenCatalogChange {
  frozen: FrozenCatalog;
  changed: string[];
}

/**
 * How the live catalog differs from what the backfill froze, or undefined when it does not (or the backfill
 * froze nothing: started before migration 0021). With `lock`, the pipeline's row stays as compared until the
 * caller's transaction ends.
 */
export async function catalogChangeOf(db: Queryable, backfillId: number, options: { lock?: boolean } = {}): Promise<FrozenCatalogChange | undefined> {
  return catalogChangeSince(db, await findFrozenCatalog(db, backfillId), options);
}

/**
 * catalogChangeOf for a backfill row the caller read already: what it froze comes in the row (written once, at
 * start). PERF: a step's guard read the backfill's row twice, once for the step and once for what it froze.
 */
export async function catalogChangeOfRow(db: Queryable, backfill: BackfillRow, options: { lock?: boolean } = {}): Promise<FrozenCatalogChange | undefined> {
  const frozen = backfill.catalogHash === null
    ? undefined
    : { backfillId: backfill.id, pipeline: backfill.pipeline, state: backfill.state, hash: backfill.catalogHash, fieldHashes: backfill.catalogFieldHashes ?? {} };
  return catalogChangeSince(db, frozen, options);
}

async function catalogChangeSince(db: Queryable, frozen: FrozenCatalog | undefined, options: { lock?: boolean }): Promise<FrozenCatalogChange | undefined> {
  if (!frozen) return undefined;
  const changed = await changesSince(db, frozen, options);
  return changed.length > 0 ? { frozen, changed } : undefined;
}

/** Every backfill in one of `states` whose frozen fields the live catalog (as the caller's transaction sees it) no longer holds. */
export async function catalogChangesUnder(db: Queryable, states: readonly string[]): Promise<FrozenCatalogChange[]> {
  const changes: FrozenCatalogChange[] = [];
  for (const frozen of await listFrozenCatalogs(db, states)) {
    const changed = await changesSince(db, frozen);
    if (changed.length > 0) changes.push({ frozen, changed });
  }
  return changes;
}

/**
 * How the live catalog differs from what the backfill froze, when the re-trigger `definition` (as just read, to
 * be called) is not the one frozen for `consumer`; undefined when it is, or when the backfill froze none for it.
 * The definition itself is compared, not a second read of the catalog, so that what was compared is what is
 * called. What changed names this re-trigger even if the catalog changed again since it was read.
 */
export async function retriggerChangeOf(db: Queryable, backfillId: number, consumer: string, definition: unknown): Promise<FrozenCatalogChange | undefined> {
  const frozen = await findFrozenCatalog(db, backfillId);
  const announced = frozen?.fieldHashes[`${RETRIGGER}${consumer}`];
  if (!frozen || announced === undefined || announced === retriggerHash(definition)) return undefined;
  const named = `re-trigger of ${consumer}`;
  const changed = (await changesSince(db, frozen)).filter((field) => field !== 'its frozen fields');
  return { frozen, changed: changed.includes(named) ? changed : [...changed, named] };
}

/** The facts the sentences of catalogPause.ts are made of. */
export function changeFacts(change: FrozenCatalogChange): { backfillId: number; pipeline: string; changed: string[] } {
  return { backfillId: change.frozen.backfillId, pipeline: change.frozen.pipeline, changed: change.changed };
}

/** Refuses (WrongState, the sentence) while the live catalog differs from what the backfill froze. */
export async function refuseIfCatalogChanged(db: Queryable, backfillId: number): Promise<void> {
  const change = await catalogChangeOf(db, backfillId);
  if (change) {
    throw new BackfillError(ErrorCode.WrongState, catalogChangedSentence(changeFacts(change), `backfill #${backfillId} cannot continue while it differs`),
      { details: { changed: change.changed } });
  }
}
