import { createHash } from 'node:crypto';
import { findFrozenCatalog, listFrozenCatalogs, readRunCatalog, recordFrozenCatalog, type FrozenCatalog, type RunCatalog } from '../../db/frozenCatalog.js';
import type { Queryable } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { Plan } from '../identify/plan.js';

// A backfill runs what was previewed and acknowledged, not the catalog of the moment. The engine reads its
// pipeline's step query and shard rule at every stage, and each consumer's re-trigger at its replay, so a
// catalog changed mid-run would publish a step nobody announced, or leave every hour "unavailable" and end the
// backfill done with nothing corrected. So `start` freezes exactly those fields with the backfill (a hash per
// field: enough to name what changed, without a second copy of SQL or of a re-trigger's URL), `catalog apply`
// refuses to change them while it is in flight (apply.ts), and before a stage or publish writes, the engine
// compares them with the live catalog and pauses on a difference (src/core/engine/catalogGuard.ts).

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** JSON with object keys sorted, so jsonb's own key order is no difference. */
function canonical(value: unknown): string {
  return JSON.stringify(value ?? null, (_key, item: unknown) => (item !== null && typeof item === 'object' && !Array.isArray(item)
    ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
    : item));
}

const RETRIGGER = 'retrigger:';

/** Each frozen field's hash, by field: step, sourceShards, shardsExpected, retrigger:<consumer>. */
export function fieldHashesOf(fields: RunCatalog): Record<string, string> {
  const hashes: Record<string, string> = {
    step: sha256(canonical(fields.stepSql)), sourceShards: sha256(canonical(fields.sourceShardsSql)), shardsExpected: sha256(canonical(fields.shardsExpected)),
  };
  for (const { consumer, retrigger } of fields.retriggers) hashes[`${RETRIGGER}${consumer}`] = sha256(canonical(retrigger));
  return hashes;
}

export function catalogHashOf(fieldHashes: Record<string, string>): string {
  return sha256(canonical(fieldHashes));
}

/** The fields that differ, as people call them: step query, shard rule, re-trigger of <consumer>. */
export function changedFields(frozen: Record<string, string>, live: Record<string, string>): string[] {
  const differs = (key: string) => frozen[key] !== live[key];
  const retriggers = [...new Set([...Object.keys(frozen), ...Object.keys(live)])]
    .filter((key) => key.startsWith(RETRIGGER) && differs(key)).sort().map((key) => `re-trigger of ${key.slice(RETRIGGER.length)}`);
  return [
    ...(differs('step') ? ['step query'] : []),
    ...(differs('sourceShards') || differs('shardsExpected') ? ['shard rule'] : []),
    ...retriggers,
  ];
}

/**
 * Inside start's transaction, once the backfill's readers are rows: records the fields the plan previewed and
 * announced. Refused, nothing started, when the catalog no longer holds them (an apply landed between the
 * plan and this transaction): what would run is then not what was previewed.
 */
export async function freezeCatalog(tx: Queryable, backfillId: number, plan: Pick<Plan, 'pipeline' | 'readers'>): Promise<void> {
  const { pipeline } = plan;
  const announced = fieldHashesOf({
    stepSql: pipeline.stepSql, sourceShardsSql: pipeline.sourceShardsSql, shardsExpected: pipeline.shardsExpected,
    retriggers: plan.readers.map((reader) => ({ consumer: reader.consumer, retrigger: reader.retrigger })),
  });
  const changed = changedFields(announced, fieldHashesOf(await readRunCatalog(tx, backfillId, pipeline.name)));
  if (changed.length > 0) {
    throw new BackfillError(ErrorCode.WrongState,
      `The catalog of ${pipeline.name} changed while this backfill was being started (${changed.join(', ')}): nothing was started. ` +
      'Start it again: it previews and announces what the catalog says now.', { details: { changed } });
  }
  await recordFrozenCatalog(tx, backfillId, catalogHashOf(announced), announced);
}

/** The frozen fields that the live catalog no longer holds; none when they are all the same. */
async function changesSince(db: Queryable, frozen: FrozenCatalog, options: { lock?: boolean } = {}): Promise<string[]> {
  const live = fieldHashesOf(await readRunCatalog(db, frozen.backfillId, frozen.pipeline, options));
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
  const frozen = await findFrozenCatalog(db, backfillId);
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

/** What the timeline, the status and a refused continue say of a backfill whose catalog changed under it. */
export function catalogChangedSentence(change: FrozenCatalogChange): string {
  return `The catalog of ${change.frozen.pipeline} changed since backfill #${change.frozen.backfillId} was announced (${change.changed.join(', ')}): ` +
    'nothing more is published; stop it, or roll it back, and start a new one.';
}

/** Refuses (WrongState, the sentence) while the live catalog differs from what the backfill froze. */
export async function refuseIfCatalogChanged(db: Queryable, backfillId: number): Promise<void> {
  const change = await catalogChangeOf(db, backfillId);
  if (change) throw new BackfillError(ErrorCode.WrongState, catalogChangedSentence(change), { details: { changed: change.changed } });
}
