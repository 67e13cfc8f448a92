import type { RunConfig } from '../backends.js';
import type { Pool } from '../db/pool.js';

/** What every core operation needs: the database (the truth) and the parsed configuration. */
export interface EngineContext {
  pool: Pool;
  config: RunConfig;
}
