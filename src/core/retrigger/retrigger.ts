import { runPipelineSql } from '../../db/pipelineSql.js';
import type { PoolClient } from '../../db/pool.js';
import { redact } from '../../redaction.js';
import { requireWebhookSecret, urlPolicyFor, type ReplayCall, type RetriggerEnvironment } from './call.js';
import { callAirflow } from './airflowRetrigger.js';
import { callDagster } from './dagsterRetrigger.js';
import type { RemoteRetrigger, Retrigger } from './definition.js';
import { runJobRetrigger } from './jobRetrigger.js';
import { callRest } from './restRetrigger.js';
import { callWebhook } from './webhookRetrigger.js';

// Runs a re-trigger of any kind: SQL in the caller's transaction, the remote kinds through their own modules
// (webhookRetrigger.ts, jobRetrigger.ts, airflowRetrigger.ts, dagsterRetrigger.ts, restRetrigger.ts). What a
// definition may hold is definition.ts's.

/** Each statement gets $1 = the corrected partitions (timestamptz[]); all run in the caller's transaction. */
export async function runSqlRetrigger(tx: PoolClient, retrigger: Extract<Retrigger, { kind: 'sql' }>, hours: Date[]): Promise<{ statements: number; rows: number }> {
  let rows = 0;
  for (const statement of retrigger.statements) {
    const result = await runPipelineSql(tx, statement, [hours]);
    rows += result.rowCount ?? 0;
  }
  return { statements: retrigger.statements.length, rows };
}

/** Runs a webhook, BullMQ, Airflow, Dagster or REST replay; returns what the timeline and the step's result keep of it. */
export async function runRemoteRetrigger(retrigger: RemoteRetrigger, call: ReplayCall, env: RetriggerEnvironment): Promise<Record<string, unknown>> {
  switch (retrigger.kind) {
    case 'webhook': {
      const result = await callWebhook(retrigger, { ...call, secret: requireWebhookSecret(env.config), timeoutMs: env.config.WEBHOOK_TIMEOUT_MS, policy: urlPolicyFor(env) });
      return { via: 'webhook', url: redact(retrigger.url), status: result.status };
    }
    case 'bullmq':
      return { via: 'bullmq', ...(await runJobRetrigger(retrigger, call, env)) };
    case 'airflow':
      return { via: 'airflow', ...(await callAirflow(retrigger, call, env)) };
    case 'dagster':
      return { via: 'dagster', ...(await callDagster(retrigger, call, env)) };
    case 'rest':
      return { via: 'rest', ...(await callRest(retrigger, call, env)) };
    default: {
      const unknown: never = retrigger;
      throw new Error(`unknown retrigger ${JSON.stringify(unknown)}`);
    }
  }
}
