import { recordEvent } from '../../db/events.js';
import { createHash } from 'node:crypto';
import { logger } from '../../log.js';
import {
  findBackfillRunFacts, insertEmissionIntent, recordEmissionResult, type BackfillRunFacts, type EmittedEventType,
} from '../../db/lineageEvents.js';
import { describeError } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { PARTITIONS_FACET, PARTITIONS_FACET_SCHEMA_URL } from './runEvent.js';

// Lineage out: the bot's own backfill runs as OpenLineage RunEvents, POSTed to OPENLINEAGE_URL when it is set.
//   START     once the backfill runs (ran_at is set)
//   COMPLETE  once it is done (the compare step finished it)
//   FAIL      once it failed after it had started running
//   ABORT     once an operator stopped it after it had started running (a rollback afterwards sends nothing more)
// Job: namespace `backfill-bot`, name `backfill.<pipeline>`. Run id: a UUID (version 5) derived from the backfill's
// id and announced_at, so every process names the same run alike and another database's backfill #1 differs.
// Output: the pipeline's table with the backfillPartitions facet (the hours the backfill rewrites).
//
// Each event is sent at most once: its row (backfill.lineage_emissions) is written and committed before the POST,
// and only the caller whose insert made the row sends it. Emitting never holds up a backfill: it runs after the
// step committed, any failure is a timeline row (lineage_emit_failed), and nothing is retried.

export const JOB_NAMESPACE = 'backfill-bot';
export const PRODUCER = 'urn:backfill-bot';
export const RUN_EVENT_SCHEMA_URL = 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent';
const FACET_SCHEMA_BASE = 'https://openlineage.io/spec/facets/1-0-1';
const HOUR_MS = 3_600_000;
/** The UUID namespace of backfill run ids (itself a fixed random UUID). */
const RUN_ID_NAMESPACE = '6f1c3c1e-8a4b-4f0e-9d7a-2b5e1c9a7d30';

/** A name-based UUID (RFC 9562 version 5) of the backfill: the same for every process, unique per backfill. */
export function backfillRunId(facts: Pick<BackfillRunFacts, 'id' | 'announcedAt'>): string {
  const namespace = Buffer.from(RUN_ID_NAMESPACE.replaceAll('-', ''), 'hex');
  const digest = createHash('sha1').update(namespace).update(`backfill/${facts.id}/${facts.announcedAt.toISOString()}`).digest();
  digest[6] = ((digest[6] ?? 0) & 0x0f) | 0x50;
  digest[8] = ((digest[8] ?? 0) & 0x3f) | 0x80;
  const hex = digest.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The events the backfill's state calls for, in the order they happened. */
export function dueEvents(facts: BackfillRunFacts): EmittedEventType[] {
  if (!facts.ranAt) return [];
  if (facts.state === 'done') return ['START', 'COMPLETE'];
  if (facts.state === 'failed') return ['START', 'FAIL'];
  // Stopped, and whatever a rollback of it made of it since: the run was cut short by an operator.
  if (facts.stoppedBy !== null) return ['START', 'ABORT'];
  return ['START'];
}

/** `postgres://host:port` of the database the pipelines' tables live in, without credentials. */
export function datasetNamespace(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  return `postgres://${url.hostname}:${url.port || '5432'}`;
}

export function backfillRunEvent(facts: BackfillRunFacts, eventType: EmittedEventType, namespace: string): Record<string, unknown> {
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
    inputs: [],
    outputs: [{
      namespace,
      name: facts.targetTable,
      facets: { [PARTITIONS_FACET]: { _producer: PRODUCER, _schemaURL: PARTITIONS_FACET_SCHEMA_URL, hours: facts.hours.map((h) => h.toISOString()) } },
    }],
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
    for (const eventType of dueEvents(facts)) await emitOnce(ctx, url, facts, eventType);
  } catch (error) {
    (ctx.log ?? logger()).warn({ backfillId, err: describeError(error) }, 'lineage: the run events could not be sent');
  }
}

async function emitOnce(ctx: EngineContext, url: string, facts: BackfillRunFacts, eventType: EmittedEventType): Promise<void> {
  const runId = backfillRunId(facts);
  if (!(await insertEmissionIntent(ctx.pool, facts.id, eventType, runId))) return;
  const event = backfillRunEvent(facts, eventType, datasetNamespace(ctx.config.DATABASE_URL));
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
