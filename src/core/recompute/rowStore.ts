import type { Pipeline } from '../../db/pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from '../../db/pool.js';
import { checksumShapeOf } from '../../db/partitions.js';
import { createRowStoreTables, lockRowStoreDdl, storeSchemaName, type RowStore } from '../../db/rowStore.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { parseStepSql } from './stepSql.js';

// A backfill's rows are kept in a store of the bot's own per pipeline (bf_<pipeline>), described with its
// tables and statements in src/db/rowStore.ts; here its names and columns are built from the pipeline's catalog row.

/** The names and columns of a pipeline's store (the tables exist once ensureRowStore ran for it). */
export async function rowStoreOf(db: Queryable, pipeline: Pipeline): Promise<RowStore> {
  const step = parseStepSql(pipeline.name, pipeline.stepSql);
  const { columns, exact } = await checksumShapeOf(db, pipeline.targetTable);
  const schema = quoteIdent(storeSchemaName(pipeline.name));
  return {
    schema,
    staged: `${schema}.staged`,
    saved: `${schema}.saved`,
    baseline: `${schema}.baseline`,
    expected: `${schema}.expected`,
    target: quoteQualified(pipeline.targetTable),
    columns,
    exact,
    keys: pipeline.keyColumns.map(quoteIdent),
    partition: quoteIdent(pipeline.partitionColumn),
    measure: quoteIdent(pipeline.measureColumn),
    stepQuery: step.query,
    stepColumns: step.columns,
  };
}

/**
 * Creates the pipeline's store if it is missing, under a lock so two starts cannot race the DDL. Its tables
 * are built from the target's own definition (LIKE), with the columns the bot needs in front, and indexed on
 * (backfill, generation, partition, key) for the joins of reconciliation, publish and rollback.
 */
export async function ensureRowStore(tx: Queryable, pipeline: Pipeline): Promise<RowStore> {
  if (storeSchemaName(pipeline.name).length > 63) {
    throw new BackfillError(ErrorCode.BadInput, `The pipeline name ${pipeline.name} is too long for its store schema (bf_<name> must fit in 63 characters).`);
  }
  await lockRowStoreDdl(tx, pipeline.name);
  const store = await rowStoreOf(tx, pipeline);
  await createRowStoreTables(tx, store);
  return store;
}
