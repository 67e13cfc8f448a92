// Every column the schema holds to a list of values (CHECK (column IN (…))) against the set the code declares for
// it. The database's lists are read back from pg_constraint of a migrated database, so a migration that changes a
// list, a value added on the TypeScript side only, and a new list with nothing in the code for it all show here.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { catalogConsumerSchema } from '../../src/core/catalog/schema.js';
import { BackfillState } from '../../src/core/states.js';
import { STEP_KINDS, StepStatus } from '../../src/core/lifecycle/stepGraph.js';
import type { BackfillRow, BackfillTargetRow, PauseCause } from '../../src/db/backfills.js';
import type { EscalationStatus, EscalationStopReason } from '../../src/db/escalations.js';
import type { EmittedEventType, LineageEventType, ProposalState, recordSeenOutcome } from '../../src/db/lineageEvents.js';
import type { ConsumerPlacement } from '../../src/db/readLog.js';
import type { ReconciliationRow } from '../../src/db/reconciliations.js';
import type { insertRowRetention } from '../../src/db/retention.js';
import type { FlagReason } from '../../dev/demo/constants.js';
import { createTestDatabase } from '../support/db.js';

/**
 * The members of a string union that exists only as a type, as a list tsc holds to exactly the union: a member
 * left out does not compile (the error names it), nor does one the union lacks. What the type says is then a
 * value this test can compare with the database's.
 */
function membersOf<T extends string>() {
  return <const L extends readonly T[]>(list: L & ([Exclude<T, L[number]>] extends [never] ? unknown : { missing: Exclude<T, L[number]> })): readonly string[] => list;
}

/** Each listed column (schema.table.column) and the values the code gives it: its runtime set where it has one. */
const CODE: Record<string, readonly string[]> = {
  'backfill.backfills.state': Object.values(BackfillState),
  'backfill.backfills.previewed_by': membersOf<BackfillRow['previewedBy']>()(['step', 'estimate']),
  'backfill.backfills.paused_for': membersOf<PauseCause>()(['breach', 'catalog']),
  'backfill.backfill_steps.status': Object.values(StepStatus),
  'backfill.backfill_steps.kind': STEP_KINDS,
  'backfill.backfill_targets.status': membersOf<BackfillTargetRow['status']>()(['pending', 'staged', 'published', 'unavailable', 'restored']),
  'backfill.backfill_consumers.notify_rule': membersOf<ConsumerPlacement['notifyRule']>()(['before', 'after']),
  'backfill.consumers.kind': catalogConsumerSchema.shape.kind.options,
  'backfill.consumers.notify_rule': catalogConsumerSchema.shape.rule.options,
  'backfill.partition_log.flag_reason': membersOf<FlagReason>()(['late_load', 'upstream_outage', 'corrupt_batch', 'flapping_connector', 'partial_load']),
  'backfill.reconciliations.phase': membersOf<ReconciliationRow['phase']>()(['staged', 'published']),
  'backfill.row_retention.rows_kind': membersOf<Parameters<typeof insertRowRetention>[1]['kind']>()(['scratch', 'undo']),
  'backfill.lineage_proposals.state': membersOf<ProposalState>()(['proposed', 'confirmed', 'rejected']),
  'backfill.lineage_events.event_type': membersOf<LineageEventType>()(['START', 'RUNNING', 'COMPLETE', 'ABORT', 'FAIL', 'OTHER']),
  'backfill.lineage_events.outcome': membersOf<Parameters<typeof recordSeenOutcome>[3]>()(['recorded', 'pending', 'rejected_job']),
  'backfill.lineage_emissions.event_type': membersOf<EmittedEventType>()(['START', 'COMPLETE', 'ABORT', 'FAIL']),
  'backfill.escalations.status': membersOf<EscalationStatus>()(['waiting', 'sending', 'sent', 'stopped', 'skipped', 'undeliverable', 'failed']),
  'backfill.escalations.stop_reason': membersOf<EscalationStopReason>()(['acknowledged', 'overridden', 'held', 'left_gate']),
};

/**
 * Values the database still accepts that the code no longer has. A step kind 'recompute' came before stage and
 * publish split it (0004 kept it in the list); nothing writes it now, and narrowing the list would refuse to
 * migrate a database that still holds such a row.
 */
const DATABASE_ONLY: Record<string, readonly string[]> = {
  'backfill.backfill_steps.kind': ['recompute'],
};

// How PostgreSQL gives back `CHECK (column IN ('a', 'b'))`: CHECK ((column = ANY (ARRAY['a'::text, 'b'::text]))).
const IN_LIST = /^CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)$/;
const LITERAL = /'((?:[^']|'')*)'::text/g;

describe('the state sets of the code and the lists of the database', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  const lists = new Map<string, string[]>();
  const unread: string[] = [];
  beforeAll(async () => {
    db = await createTestDatabase('empty');
    const { rows } = await db.pool.query<{ schema: string; table: string; name: string; definition: string }>(
      `SELECT n.nspname AS schema, c.relname AS "table", k.conname AS name, pg_get_constraintdef(k.oid) AS definition
         FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE k.contype = 'c' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND pg_get_constraintdef(k.oid) LIKE '%= ANY (ARRAY[%'`);
    for (const row of rows) {
      const match = IN_LIST.exec(row.definition);
      if (!match?.[1] || match[2] === undefined) {
        unread.push(`${row.schema}.${row.table} ${row.name}: ${row.definition}`);
        continue;
      }
      lists.set(`${row.schema}.${row.table}.${match[1]}`, [...match[2].matchAll(LITERAL)].map((literal) => (literal[1] ?? '').replaceAll("''", "'")));
    }
  });
  afterAll(async () => db.drop());

  it('every list is a plain IN over one column, and each has its set in the code', () => {
    // A list inside a larger condition is not one this test can compare: say what it is instead of passing it by.
    expect(unread).toEqual([]);
    expect([...lists.keys()].sort()).toEqual(Object.keys(CODE).sort());
  });

  it.each(Object.entries(CODE))('%s holds what the code declares', (column, values) => {
    const database = lists.get(column);
    expect(database, `${column} has no CHECK … IN list in the migrated database`).toBeDefined();
    expect([...values, ...(DATABASE_ONLY[column] ?? [])].sort()).toEqual([...(database ?? [])].sort());
  });
});
