import type { RunConfig } from '../backends.js';
import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';

/** What every core operation needs: the database (the truth) and the parsed configuration. */
export interface EngineContext {
  pool: Pool;
  config: RunConfig;
  /** Where its lines go, bound to what it works on (a step binds backfillId, step, generation); unset: the root logger. */
  log?: Logger;
  /** What the services count for GET /metrics (src/metrics.ts); unset (the CLI, most tests): nothing is counted. */
  metrics?: EngineMetrics;
}

/** What the core reports as it happens; the rest of the metrics are read from the rows when scraped. */
export interface EngineMetrics {
  /** A claimed step ended: its outcome (done, blocked, … or error) and how long its body ran. */
  stepFinished(kind: string, outcome: string, seconds: number): void;
  /** A partition's rows went live (counted after the publish committed). */
  rowsPublished(pipeline: string, rows: number): void;
}
