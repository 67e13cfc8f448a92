import {
  deleteConsumerUnlessReferenced, deletePipelineUnlessReferenced, findUnfinishedBackfillsOf, findUnfinishedReaders, lockCatalog, readCatalogRows,
  setConsumerDependencies, setSigners, upsertCatalogConsumer, upsertCatalogPipeline, type CatalogRows,
} from '../../db/catalog.js';
import { recordEvent } from '../../db/events.js';
import { withClient, withTransaction, type Pool, type PoolClient } from '../../db/pool.js';
import { insertWatermarkIfNone } from '../../db/watermarks.js';
import type { Config } from '../../config.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { ACTIVE_STATES } from '../states.js';
import { catalogChangesUnder } from './frozen.js';
import { catalogRows, diffCatalog, type CatalogChange, type CatalogPlan } from './plan.js';
import { parseCatalogText, type Catalog } from './schema.js';

// `backfill catalog plan|apply <file>`. Apply writes the whole difference in one transaction, under a lock that
// makes a second apply wait and diff against the first one's result. Plan runs exactly apply's statements in a
// transaction it always rolls back, so whatever plan says apply would refuse is what apply refuses.
//
// What is never removed (the decision, also in docs/catalog.md):
//   - a consumer an unfinished backfill reads, or a pipeline with an unfinished backfill: its replay, its
//     owner's acknowledgement and its rollback need the row. Refused, naming the backfills.
//   - a consumer or pipeline the record refers to (reads, signatures, finished backfills, the partition log):
//     the history keeps its names. Refused, naming the table; keep it in the file.
// A change is applied even while a backfill runs (a new owner, a delegate, another pipeline), except to what a
// backfill in flight froze when it was started: its pipeline's step query, shard rule, target table and its
// partition, key and measure columns, and its consumers' re-triggers (frozen.ts). It runs what was previewed and acknowledged; a change to those is refused, naming
// the backfill, until it is done or stopped, and a backfill started after the apply runs the new definition.

export interface CatalogInput {
  /** The file's text (YAML), and where it came from, for messages. */
  text: string;
  source: string;
}

/** What checking the file needs of the configuration: the hosts re-triggers may call (unset: none). */
export type CatalogPolicy = Partial<Pick<Config, 'RETRIGGER_ALLOWED_HOSTS'>>;

async function unfinishedRefusals(tx: PoolClient, removedConsumers: string[], removedPipelines: string[]): Promise<string[]> {
  const readers = await findUnfinishedReaders(tx, removedConsumers, ACTIVE_STATES);
  const backfills = await findUnfinishedBackfillsOf(tx, removedPipelines, ACTIVE_STATES);
  const ids = (list: number[]) => list.map((id) => `#${id}`).join(', ');
  return [
    ...readers.map((row) => `consumer ${row.consumer} cannot be removed: unfinished backfill ${ids(row.backfillIds)} will replay it and may need its owner; ` +
      'keep it in the file until that backfill is done, cancelled or rolled back'),
    ...backfills.map((row) => `pipeline ${row.pipeline} cannot be removed: backfill ${ids(row.backfillIds)} of it is unfinished; ` +
      'keep it in the file until that backfill is done, cancelled or rolled back'),
  ];
}

function namesOf(changes: readonly CatalogChange[], entity: CatalogChange['entity'], action: CatalogChange['action']): string[] {
  return changes.filter((change) => change.entity === entity && change.action === action).map((change) => change.name);
}

/** The removals the record still refers to, each tried under a savepoint: a refusal per one that is. */
async function removeUnreferenced(tx: PoolClient, consumers: string[], pipelines: string[]): Promise<string[]> {
  const refusals: string[] = [];
  for (const name of consumers) {
    const outcome = await deleteConsumerUnlessReferenced(tx, name);
    if (!outcome.deleted) refusals.push(`consumer ${name} cannot be removed: ${outcome.referencedBy} still refers to it (the record keeps who read, signed and was told); keep it in the file`);
  }
  for (const name of pipelines) {
    const outcome = await deletePipelineUnlessReferenced(tx, name);
    if (!outcome.deleted) refusals.push(`pipeline ${name} cannot be removed: ${outcome.referencedBy} still refers to it (its partition log and backfills are its record); keep it in the file`);
  }
  return refusals;
}

/**
 * Each backfill in flight whose frozen fields the written difference changes, as a refusal: after the writes, in
 * the same transaction, so what is compared is exactly what the apply would leave.
 */
async function frozenFieldRefusals(tx: PoolClient): Promise<string[]> {
  return (await catalogChangesUnder(tx, ACTIVE_STATES)).map(({ frozen, changed }) =>
    `backfill #${frozen.backfillId} of ${frozen.pipeline} is ${frozen.state} and runs what it announced, so its ${changed.join(', ')} cannot change now: ` +
    `wait until it is done, or stop it (\`stop ${frozen.backfillId} <reason>\`), then apply; a backfill started after that runs the new definition`);
}

/** Writes the difference in the order the foreign keys need; returns the removals and changes that were refused. */
async function writeDifference(tx: PoolClient, wanted: CatalogRows, plan: CatalogPlan, actor: string): Promise<string[]> {
  const touched = (entity: CatalogChange['entity']) => new Set([...namesOf(plan.changes, entity, 'add'), ...namesOf(plan.changes, entity, 'change')]);
  const pipelines = touched('pipeline');
  for (const pipeline of wanted.pipelines) {
    if (!pipelines.has(pipeline.name)) continue;
    await upsertCatalogPipeline(tx, pipeline);
    // In the same transaction as the row, so the normal run can start the moment the pipeline exists.
    if (pipeline.watermark !== null) await insertWatermarkIfNone(tx, pipeline.name, pipeline.watermark, `${actor} (catalog)`);
  }
  const consumers = touched('consumer');
  for (const consumer of wanted.consumers) if (consumers.has(consumer.name)) await upsertCatalogConsumer(tx, consumer);
  if (consumers.size > 0) {
    const links = wanted.consumers.flatMap((consumer) => consumer.dependsOn.map((dependsOn) => ({ consumer: consumer.name, dependsOn })));
    await setConsumerDependencies(tx, links, wanted.consumers.map((consumer) => consumer.name));
  }
  if (plan.changes.some((change) => change.entity === 'signer')) await setSigners(tx, wanted.signers, actor);
  const removedConsumers = namesOf(plan.changes, 'consumer', 'remove');
  const removedPipelines = namesOf(plan.changes, 'pipeline', 'remove');
  const refusals = await unfinishedRefusals(tx, removedConsumers, removedPipelines);
  const unreferenced = await removeUnreferenced(tx, removedConsumers, removedPipelines);
  return [...refusals, ...unreferenced, ...(await frozenFieldRefusals(tx))];
}

/** Diffs and writes inside the caller's transaction; the caller commits (apply) or rolls back (plan). */
async function planAndWrite(tx: PoolClient, catalog: Catalog, source: string, actor: string): Promise<CatalogPlan> {
  await lockCatalog(tx);
  const stored = await readCatalogRows(tx);
  // The database's own order of names is its collation's; the file's is JavaScript's: compare as sets.
  const storedSorted = { ...stored, consumers: stored.consumers.map((consumer) => ({ ...consumer, dependsOn: [...consumer.dependsOn].sort() })) };
  const wanted = catalogRows(catalog);
  const plan = diffCatalog(storedSorted, wanted, source);
  if (plan.changes.length === 0) return plan;
  return { ...plan, refusals: await writeDifference(tx, wanted, plan, actor) };
}

/** What applying the file would change, and what it would refuse; nothing is changed. */
export async function planCatalog(pool: Pool, input: CatalogInput, actor: string, policy: CatalogPolicy = {}): Promise<CatalogPlan> {
  const catalog = parseCatalogText(input.text, input.source, policy.RETRIGGER_ALLOWED_HOSTS);
  return withClient(pool, async (client) => {
    await client.query('BEGIN');
    try {
      return await planAndWrite(client, catalog, input.source, actor);
    } finally {
      await client.query('ROLLBACK');
    }
  });
}

/**
 * Applies the file in one transaction, with an event row naming who applied it and what changed; refused, with
 * nothing changed, when the file is not valid or a removal may not be made.
 */
export async function applyCatalog(pool: Pool, input: CatalogInput, actor: string, policy: CatalogPolicy = {}): Promise<CatalogPlan> {
  const catalog = parseCatalogText(input.text, input.source, policy.RETRIGGER_ALLOWED_HOSTS);
  return withTransaction(pool, async (tx) => {
    const plan = await planAndWrite(tx, catalog, input.source, actor);
    if (plan.refusals.length > 0) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `The catalog ${input.source} was not applied (nothing changed):\n${plan.refusals.map((refusal) => `  - ${refusal}`).join('\n')}`,
        { details: { refusals: plan.refusals } });
    }
    if (plan.changes.length > 0) {
      await recordEvent(tx, {
        actor, kind: 'catalog_applied',
        detail: { source: input.source, changes: plan.changes.map((change) => `${change.action} ${change.entity} ${change.name}`) },
      });
    }
    return plan;
  });
}
