import type { CatalogConsumerRow, CatalogPipelineRow, CatalogRows, CatalogSignerRow } from '../../db/catalog.js';
import type { Catalog, CatalogConsumer, CatalogPipeline } from './schema.js';

// The difference between the catalog file and the database: per pipeline, consumer and signer, what would be
// added (+), changed (~, each field before → after) or removed (-). Pure: it compares two values, so the CLI's
// `catalog plan` and `catalog apply` (apply.ts, which also decides what may not be removed) say the same thing.

type CatalogEntity = 'pipeline' | 'consumer' | 'signer';

export interface FieldChange {
  field: string;
  before: unknown;
  after: unknown;
}

export type CatalogChange =
  | { action: 'add'; entity: CatalogEntity; name: string }
  | { action: 'change'; entity: CatalogEntity; name: string; fields: FieldChange[] }
  | { action: 'remove'; entity: CatalogEntity; name: string };

export interface CatalogPlan {
  source: string;
  changes: CatalogChange[];
  /** Removals that would lose the record or strand a backfill in flight: apply refuses while there are any. */
  refusals: string[];
}

/** The file's pipeline as the row the database would hold. */
function pipelineRow(pipeline: CatalogPipeline): CatalogPipelineRow {
  return {
    name: pipeline.name, targetTable: pipeline.target_table, partitionColumn: pipeline.partition_column, keyColumns: pipeline.key_columns,
    measureColumn: pipeline.measure_column, stepSql: pipeline.step_sql, estimateSql: pipeline.estimate_sql,
    sourceShardsSql: pipeline.source_shards_sql, shardsExpected: pipeline.shards_expected, watermark: pipeline.watermark,
  };
}

/** The file's consumer as the row the database would hold (dependencies sorted, as the database reads them back). */
function consumerRow(consumer: CatalogConsumer): CatalogConsumerRow {
  return {
    name: consumer.name, kind: consumer.kind, owner: consumer.owner, pipeline: consumer.pipeline, notifyRule: consumer.rule,
    explicitRank: consumer.rank, dependsOn: [...consumer.depends_on].sort(), retrigger: consumer.retrigger, reportTotalSql: consumer.report_total_sql,
    escalation: consumer.escalation,
  };
}

function signerRows(catalog: Catalog): CatalogSignerRow[] {
  return catalog.signers.flatMap((entry) => entry.users.map((signer) => ({ report: entry.report, signer })));
}

export function catalogRows(catalog: Catalog): CatalogRows {
  return { pipelines: catalog.pipelines.map(pipelineRow), consumers: catalog.consumers.map(consumerRow), signers: signerRows(catalog) };
}

// The file's words for the columns, so a change reads as the line to edit.
const PIPELINE_FIELDS: Record<Exclude<keyof CatalogPipelineRow, 'name'>, string> = {
  targetTable: 'target_table', partitionColumn: 'partition_column', keyColumns: 'key_columns', measureColumn: 'measure_column',
  stepSql: 'step_sql', estimateSql: 'estimate_sql', sourceShardsSql: 'source_shards_sql', shardsExpected: 'shards_expected',
  watermark: 'watermark',
};
const CONSUMER_FIELDS: Record<Exclude<keyof CatalogConsumerRow, 'name'>, string> = {
  kind: 'kind', owner: 'owner', pipeline: 'pipeline', notifyRule: 'rule', explicitRank: 'rank', dependsOn: 'depends_on',
  retrigger: 'retrigger', reportTotalSql: 'report_total_sql', escalation: 'escalation',
};

/** JSON with object keys sorted: jsonb gives keys back in its own order, which is no change. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) => (item !== null && typeof item === 'object' && !Array.isArray(item)
    ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => a.localeCompare(b)))
    : item));
}

function fieldChanges<Row extends { name: string }>(fields: Record<string, string>, before: Row, after: Row): FieldChange[] {
  return Object.entries(fields).flatMap(([key, field]) => {
    const was = (before as Record<string, unknown>)[key] ?? null;
    const now = (after as Record<string, unknown>)[key] ?? null;
    return canonical(was) === canonical(now) ? [] : [{ field, before: was, after: now }];
  });
}

function diffNamed<Row extends { name: string }>(entity: CatalogEntity, fields: Record<string, string>, stored: readonly Row[], wanted: readonly Row[]): CatalogChange[] {
  const storedByName = new Map(stored.map((row) => [row.name, row]));
  const wantedNames = new Set(wanted.map((row) => row.name));
  const changes: CatalogChange[] = [];
  for (const row of wanted) {
    const before = storedByName.get(row.name);
    if (!before) {
      changes.push({ action: 'add', entity, name: row.name });
      continue;
    }
    const changed = fieldChanges(fields, before, row);
    if (changed.length > 0) changes.push({ action: 'change', entity, name: row.name, fields: changed });
  }
  for (const row of stored) if (!wantedNames.has(row.name)) changes.push({ action: 'remove', entity, name: row.name });
  // By name, whatever the file's order: moving an entry in the file is no change, and reads as none.
  return changes.sort((a, b) => a.name.localeCompare(b.name));
}

const ENTITY_ORDER: Record<CatalogEntity, number> = { pipeline: 0, consumer: 1, signer: 2 };

function signerKey(row: CatalogSignerRow): string {
  return `${row.report}: ${row.signer}`;
}

/**
 * The file's watermark is where a pipeline starts, not where it is: once the pipeline has one, the normal run
 * and backfills move it every hour, and a file that set it again would make the run redo or skip hours
 * silently. So it is a difference only while the pipeline has none (added, or added before it was declared).
 */
function startingWatermarks(stored: readonly CatalogPipelineRow[], wanted: readonly CatalogPipelineRow[]): CatalogPipelineRow[] {
  const current = new Map(stored.map((row) => [row.name, row.watermark]));
  return wanted.map((row) => ({ ...row, watermark: current.get(row.name) ?? row.watermark }));
}

/** Every difference between what the database holds and what the file declares: pipelines, consumers, signers, each by name. */
export function diffCatalog(stored: CatalogRows, wanted: CatalogRows, source: string): CatalogPlan {
  const storedSigners = new Set(stored.signers.map(signerKey));
  const wantedSigners = new Set(wanted.signers.map(signerKey));
  const changes = [
    ...diffNamed('pipeline', PIPELINE_FIELDS, stored.pipelines, startingWatermarks(stored.pipelines, wanted.pipelines)),
    ...diffNamed('consumer', CONSUMER_FIELDS, stored.consumers, wanted.consumers),
    ...[...wantedSigners].filter((key) => !storedSigners.has(key)).map((name): CatalogChange => ({ action: 'add', entity: 'signer', name })),
    ...[...storedSigners].filter((key) => !wantedSigners.has(key)).map((name): CatalogChange => ({ action: 'remove', entity: 'signer', name })),
  ].sort((a, b) => ENTITY_ORDER[a.entity] - ENTITY_ORDER[b.entity] || a.name.localeCompare(b.name));
  return { source, changes, refusals: [] };
}
