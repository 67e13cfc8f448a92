import { BackfillError, ErrorCode } from '../errors.js';
import type { Queryable } from './pool.js';
import { typedText } from '../markup.js';
import { prepared } from './prepared.js';

export interface Pipeline {
  name: string;
  targetTable: string;
  partitionColumn: string;
  keyColumns: string[];
  measureColumn: string;
  stepSql: string;
  /** One row (rows, total) for the hour $1: what the step would produce, cheaper than running it. */
  estimateSql?: string | null;
  sourceShardsSql: string;
  shardsExpected: number;
}

/** A pipeline row's columns as the Pipeline type names them (the catalog reads them too, beside its watermark). */
export const PIPELINE_COLUMNS = `name, target_table AS "targetTable", partition_column AS "partitionColumn", key_columns AS "keyColumns",
         measure_column AS "measureColumn", step_sql AS "stepSql", estimate_sql AS "estimateSql", source_shards_sql AS "sourceShardsSql",
         shards_expected AS "shardsExpected"`;

const SELECT_PIPELINE = `SELECT ${PIPELINE_COLUMNS} FROM backfill.pipelines`;

export async function findPipeline(db: Queryable, name: string): Promise<Pipeline | undefined> {
  const { rows } = await db.query<Pipeline>(prepared(`${SELECT_PIPELINE} WHERE name = $1::text`), [name]);
  return rows[0];
}

async function listPipelineNames(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>('SELECT name FROM backfill.pipelines ORDER BY name');
  return rows.map((row) => row.name);
}

/** The pipeline, or an error that lists the pipelines that do exist. */
export async function requirePipeline(db: Queryable, name: string): Promise<Pipeline> {
  const pipeline = await findPipeline(db, name);
  if (pipeline) return pipeline;
  const known = await listPipelineNames(db);
  throw new BackfillError(ErrorCode.UnknownPipeline,
    `There is no pipeline called "${typedText(name)}". Known pipelines: ${known.length ? known.join(', ') : '(none registered)'}.`);
}
