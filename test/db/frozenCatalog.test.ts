// readRunCatalog, which every step reads for the catalog fence: the pipeline's fields and the re-trigger of each
// consumer the backfill replays, in one statement, equal to the two statements it was (the pipeline's row, then the
// consumers in name order), and when the pipeline is gone from the catalog. Real PostgreSQL.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRunCatalog, type RunCatalog } from '../../src/db/frozenCatalog.js';
import { withStatementSeam } from '../../src/db/pool.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

let engine: TestEngine;
let backfillId: number;

beforeAll(async () => {
  engine = await createTestEngine();
  backfillId = await approvedNight15(engine.ctx, 'run catalog test');
});

afterAll(async () => {
  await engine.close();
});

/** The two statements readRunCatalog was. */
async function readApart(id: number, pipeline: string): Promise<RunCatalog> {
  const db = engine.ctx.pool;
  const { rows: [row] } = await db.query<Omit<RunCatalog, 'retriggers'>>(
    `SELECT step_sql AS "stepSql", source_shards_sql AS "sourceShardsSql", shards_expected AS "shardsExpected", target_table AS "targetTable",
            partition_column AS "partitionColumn", key_columns AS "keyColumns", measure_column AS "measureColumn"
     FROM backfill.pipelines WHERE name = $1::text`, [pipeline]);
  const { rows: retriggers } = await db.query<{ consumer: string; retrigger: unknown }>(
    `SELECT bc.consumer, c.retrigger FROM backfill.backfill_consumers bc LEFT JOIN backfill.consumers c ON c.name = bc.consumer
     WHERE bc.backfill_id = $1::bigint ORDER BY bc.consumer COLLATE "C"`, [id]);
  return {
    stepSql: row?.stepSql ?? null, sourceShardsSql: row?.sourceShardsSql ?? null, shardsExpected: row?.shardsExpected ?? null,
    targetTable: row?.targetTable ?? null, partitionColumn: row?.partitionColumn ?? null, keyColumns: row?.keyColumns ?? null, measureColumn: row?.measureColumn ?? null,
    retriggers,
  };
}

describe('readRunCatalog', () => {
  it('reads what the pipeline\'s row and the consumers\' re-triggers say, in one statement', async () => {
    const statements: string[] = [];
    const client = await engine.ctx.pool.connect();
    try {
      const read = await readRunCatalog(withStatementSeam(client, async (statement) => { statements.push(statement); }), backfillId, 'orders', { lock: true });
      expect(read).toEqual(await readApart(backfillId, 'orders'));
      expect(read.retriggers.length).toBeGreaterThan(1);
      expect(read.retriggers.every((r) => r.retrigger !== null)).toBe(true);
      expect(statements).toHaveLength(1);
    } finally {
      client.release();
    }
  });

  it('reads the re-triggers still when the pipeline is gone from the catalog', async () => {
    const db = engine.ctx.pool;
    const gone = await readRunCatalog(db, backfillId, 'no_such_pipeline');
    expect(gone).toEqual(await readApart(backfillId, 'no_such_pipeline'));
    expect(gone.stepSql).toBeNull();
    expect(gone.retriggers.length).toBeGreaterThan(1);
  });
});
