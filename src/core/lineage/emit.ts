import { createHash } from 'node:crypto';
import { recordEvent } from '../../db/events.js';
import {
  findBackfillRunFacts, insertEmissionIntent, recordEmissionResult, type BackfillRunFacts, type EmittedEventType,
} from '../../db/lineageEvents.js';
import { runPipelineSql } from '../../db/pipelineSql.js';
import { findPipeline } from '../../db/pipelines.js';
import type { Queryable } from '../../db/pool.js';
import { describeError } from '../../errors.js';
import { logger } from '../../log.js';
import type { EngineContext } from '../context.js';
import { parseStepSql } from '../recompute/stepSql.js';

// Lineage out: the bot's own backfill runs as OpenLineage RunEvents, POSTed to OPENLINEAGE_URL when it is set.
//   START     once the backfill runs (ran_at is set)
//   COMPLETE  once it is done (the compare step finished it)
//   FAIL      once it failed after it had started running
//   ABORT     once an operator stopped it after it had started running (a rollback afterwards sends nothing more)
// Job: namespace `backfill-bot`, name `backfill.<pipeline>`. Run id: a UUID version 7 (RFC 9562, which the
// OpenLineage object model recommends) whose time is the backfill's announced_at and whose other bits are a hash
// of its id and that time: every process names the same run alike, runs sort by when they began, and another
// database's backfill #1 differs.
// Datasets are named as OpenLineage names PostgreSQL tables (its naming.md): namespace `postgres://host:port`,
// name `database.schema.table`, which is how dbt's and Airflow's integrations name the same tables, so a
// lineage server joins the bot's runs to theirs on the same dataset.
//   outputs  the pipeline's table, with the backfillBot_partitions facet (the hours the backfill rewrites)
//   inputs   the tables the pipeline's step reads, as PostgreSQL plans its query (see stepSourceTables)
//
// Each event is sent at most once: its row (backfill.lineage_emissions) is written and committed before the POST,
// and only the caller whose insert made the row sends it. Emitting never holds up a backfill: it runs after the
// step committed, any failure is a timeline row (lineage_emit_failed), and nothing is retried.

const JOB_NAMESPACE = 'backfill-bot';
const PRODUCER = 'urn:backfill-bot';
const RUN_EVENT_SCHEMA_URL = 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent';
const FACET_SCHEMA_BASE = 'https://openlineage.io/spec/facets/1-0-1';
/**
 * Where this repository's files are served as they are (GitHub's raw URLs of the main branch). A facet's
 * `_schemaURL` must lead to its schema, and the bot's own facet's schema is a file here: a copy of the
 * repository published elsewhere changes this one address.
 */
export const REPOSITORY_RAW_URL = 'https://raw.githubusercontent.com/backfill-bot/backfill-bot/main';
/**
 * The custom output facet: the hours the backfill rewrote. Named `{prefix}_{name}`, as the specification asks
 * of a facet it does not define, so it can never collide with a standard one.
 */
const EMITTED_PARTITIONS_FACET = 'backfillBot_partitions';
/**
 * Its schema, in this repository. Versioned by folder as OpenLineage's own facets are: a change to the facet is
 * a new folder, so the address an event was sent with keeps meaning what it meant.
 */
export const EMITTED_PARTITIONS_FACET_SCHEMA_FILE = 'schemas/openlineage/backfill-bot/1-0-0/BackfillBotPartitionsDatasetFacet.json';
export const EMITTED_PARTITIONS_FACET_SCHEMA_URL = `${REPOSITORY_RAW_URL}/${EMITTED_PARTITIONS_FACET_SCHEMA_FILE}#/$defs/BackfillBotPartitionsDatasetFacet`;
const HOUR_MS = 3_600_000;
/** The UUID namespace of backfill run ids (itself a fixed random UUID). */
const RUN_ID_NAMESPACE = '6f1c3c1e-8a4b-4f0e-9d7a-2b5e1c9a7d30';

/**
 * The backfill's run id: a UUID version 7 (RFC 9562 section 5.7), the same for every process, unique per
 * backfill. Its 48-bit time is announced_at in milliseconds; the 74 bits the RFC leaves to the implementation
 * are a SHA-256 of the backfill's id and announcement (a name-based fill, not a random one, so that the START
 * and the COMPLETE sent by two different workers carry the same id).
 */
export function backfillRunId(facts: Pick<BackfillRunFacts, 'id' | 'announcedAt'>): string {
  const bytes = createHash('sha256').update(`${RUN_ID_NAMESPACE}/backfill/${facts.id}/${facts.announcedAt.toISOString()}`).digest().subarray(0, 16);
  bytes.writeUIntBE(facts.announcedAt.getTime(), 0, 6);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x70;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The events the backfill's state calls for, in the order they happened. */
function dueEvents(facts: BackfillRunFacts): EmittedEventType[] {
  if (!facts.ranAt) return [];
  if (facts.state === 'done') return ['START', 'COMPLETE'];
  if (facts.state === 'failed') return ['START', 'FAIL'];
  // Stopped, and whatever a rollback of it made of it since: the run was cut short by an operator.
  if (facts.stoppedBy !== null) return ['START', 'ABORT'];
  return ['START'];
}

/** `postgres://host:port` of the database the pipelines' tables live in, without credentials. */
function datasetNamespace(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  return `postgres://${url.hostname}:${url.port || '5432'}`;
}

/** The datasets of a backfill's run, named as OpenLineage names PostgreSQL tables. */
export interface RunDatasets {
  /** `postgres://host:port` (datasetNamespace). */
  namespace: string;
  /** The pipeline's table, `database.schema.table`. */
  output: string;
  /** The tables its step reads, `database.schema.table`, sorted. */
  inputs: string[];
}

function backfillRunEvent(facts: BackfillRunFacts, eventType: EmittedEventType, datasets: RunDatasets): Record<string, unknown> {
  const at = eventType === 'START' ? facts.ranAt : facts.finishedAt;
  const first = facts.hours[0];
  const last = facts.hours.at(-1);
  return {
    eventType,
    eventTime: (at ?? new Date()).toISOString(),
    producer: PRODUCER,
    schemaURL: RUN_EVENT_SCHEMA_URL,
    run: {
      runId: backfillRunId(facts),
      facets: first && last ? {
        nominalTime: {
          _producer: PRODUCER, _schemaURL: `${FACET_SCHEMA_BASE}/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet`,
          nominalStartTime: first.toISOString(), nominalEndTime: new Date(last.getTime() + HOUR_MS).toISOString(),
        },
        ...(eventType === 'FAIL' && facts.failure ? {
          errorMessage: { _producer: PRODUCER, _schemaURL: `${FACET_SCHEMA_BASE}/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet`, message: facts.failure, programmingLanguage: 'SQL' },
        } : {}),
      } : {},
    },
    job: { namespace: JOB_NAMESPACE, name: `backfill.${facts.pipeline}` },
    inputs: datasets.inputs.map((name) => ({ namespace: datasets.namespace, name })),
    outputs: [{
      namespace: datasets.namespace,
      name: datasets.output,
      facets: {
        [EMITTED_PARTITIONS_FACET]: { _producer: PRODUCER, _schemaURL: EMITTED_PARTITIONS_FACET_SCHEMA_URL, hours: facts.hours.map((h) => h.toISOString()) },
      },
    }],
  };
}

/** A relation an EXPLAIN (VERBOSE, FORMAT JSON) plan scans. */
export interface ScannedRelation {
  schema: string;
  table: string;
}

/** Every relation the plan scans, at any depth (joins, subqueries, CTEs, init plans), in plan order. */
function scannedRelations(plan: unknown): ScannedRelation[] {
  const found: ScannedRelation[] = [];
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) {
      node.forEach(visit);
      return;
    }
    if (node === null || typeof node !== 'object') return;
    const { 'Relation Name': table, Schema: schema } = node as Record<string, unknown>;
    if (typeof table === 'string' && typeof schema === 'string') found.push({ schema, table });
    Object.values(node).forEach(visit);
  };
  visit(plan);
  return found;
}

/**
 * The tables a pipeline's step reads for `hour`, as `schema.table`: what PostgreSQL's plan of the step's query
 * scans. EXPLAIN plans without running anything, and takes only the locks a read takes. The plan rather than
 * the SQL's text, because the plan is PostgreSQL's own reading of it: the search_path, joins, subqueries and
 * CTEs resolved. A view is named by the tables under it, since that is what is scanned.
 */
export async function stepSourceTables(db: Queryable, pipeline: string, stepSql: string, hour: Date): Promise<ScannedRelation[]> {
  const { query } = parseStepSql(pipeline, stepSql);
  const { rows } = await runPipelineSql<{ 'QUERY PLAN': unknown }>(db, `EXPLAIN (VERBOSE, FORMAT JSON) ${query}`, [hour]);
  return scannedRelations(rows[0]?.['QUERY PLAN']);
}

/**
 * The database's name and the relations as the tables a reader names: a partition becomes the partitioned
 * table at its root (the plan scans a partition such as `clicks_2026_11`; dbt and Airflow name `clicks`), each
 * named once.
 */
export async function lineageTableNames(db: Queryable, relations: readonly ScannedRelation[]): Promise<{ database: string; tables: string[] }> {
  // NOTE: a read of PostgreSQL's own catalog (pg_class), not of the bot's tables: it serves only these names.
  const { rows } = await db.query<{ database: string; tables: string[] }>(
    `SELECT current_database() AS database,
            coalesce(array_agg(DISTINCT rn.nspname || '.' || rc.relname ORDER BY rn.nspname || '.' || rc.relname), '{}') AS tables
     FROM unnest($1::text[], $2::text[]) AS s(schema_name, table_name)
     JOIN pg_catalog.pg_namespace n ON n.nspname = s.schema_name
     JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = s.table_name
     JOIN pg_catalog.pg_class rc ON rc.oid = coalesce(pg_catalog.pg_partition_root(c.oid), c.oid)
     JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace`,
    [relations.map((r) => r.schema), relations.map((r) => r.table)]);
  const row = rows[0];
  if (!row) throw new Error('current_database() returned no row');
  return row;
}

/**
 * The run's datasets. A step that cannot be planned now (a source dropped since, a statement timeout) leaves
 * the inputs empty, with a warning: the event still says what the backfill wrote.
 */
export async function runDatasets(ctx: EngineContext, facts: BackfillRunFacts): Promise<RunDatasets> {
  let sources: ScannedRelation[] = [];
  const hour = facts.hours[0];
  try {
    const pipeline = await findPipeline(ctx.pool, facts.pipeline);
    if (pipeline && hour) sources = await stepSourceTables(ctx.pool, pipeline.name, pipeline.stepSql, hour);
  } catch (error) {
    (ctx.log ?? logger()).warn({ backfillId: facts.id, err: describeError(error) },
      'lineage: the step could not be planned to name the tables it reads; the run events list no inputs');
  }
  const { database, tables } = await lineageTableNames(ctx.pool, sources);
  return {
    namespace: datasetNamespace(ctx.config.DATABASE_URL),
    output: `${database}.${facts.targetTable}`,
    inputs: tables.map((table) => `${database}.${table}`),
  };
}

/**
 * Sends whatever run events of the backfill are due and not yet sent. Never throws: lineage is a report about
 * the backfill, and a receiver that is down must not fail or delay a step beyond its timeout.
 */
export async function emitRunEvents(ctx: EngineContext, backfillId: number): Promise<void> {
  const url = ctx.config.OPENLINEAGE_URL;
  if (!url) return;
  try {
    const facts = await findBackfillRunFacts(ctx.pool, backfillId);
    if (!facts) return;
    // Read once, and only for an event this caller is to send: this runs after every step of the backfill.
    let datasets: Promise<RunDatasets> | undefined;
    const describe = () => (datasets ??= runDatasets(ctx, facts));
    for (const eventType of dueEvents(facts)) await emitOnce(ctx, url, facts, eventType, describe);
  } catch (error) {
    (ctx.log ?? logger()).warn({ backfillId, err: describeError(error) }, 'lineage: the run events could not be sent');
  }
}

async function emitOnce(ctx: EngineContext, url: string, facts: BackfillRunFacts, eventType: EmittedEventType, datasets: () => Promise<RunDatasets>): Promise<void> {
  const runId = backfillRunId(facts);
  if (!(await insertEmissionIntent(ctx.pool, facts.id, eventType, runId))) return;
  const event = backfillRunEvent(facts, eventType, await datasets());
  const result = await post(url, event, ctx.config.WEBHOOK_TIMEOUT_MS, ctx.config.OPENLINEAGE_API_KEY);
  await recordEmissionResult(ctx.pool, facts.id, eventType, result);
  await recordEvent(ctx.pool, {
    backfillId: facts.id, actor: JOB_NAMESPACE, kind: result.error ? 'lineage_emit_failed' : 'lineage_emitted',
    detail: { eventType, runId, url: new URL(url).origin, ...(result.status ? { status: result.status } : {}), ...(result.error ? { error: result.error } : {}) },
  });
}

async function post(url: string, event: Record<string, unknown>, timeoutMs: number, apiKey: string | undefined): Promise<{ status?: number; error?: string }> {
  try {
    const response = await fetch(url, {
      method: 'POST',
      body: JSON.stringify(event),
      headers: { 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
      signal: AbortSignal.timeout(timeoutMs),
    });
    await response.body?.cancel();
    return response.ok ? { status: response.status } : { status: response.status, error: `the receiver answered ${response.status}` };
  } catch (error) {
    return { error: describeError(error) };
  }
}
