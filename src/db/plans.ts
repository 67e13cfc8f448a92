import type { Queryable } from './pool.js';

// Frozen plans (backfill.plans): a plan's inputs and their hash, so `start` from it can refuse if they changed.

export async function insertPlan(db: Queryable, plan: { pipeline: string; target: string; inputsHash: string; inputs: Record<string, unknown>; createdBy: string }): Promise<number | undefined> {
  const { rows } = await db.query<{ id: number }>(
    `INSERT INTO backfill.plans (pipeline, target, inputs_hash, inputs, created_by) VALUES ($1::text, $2::text, $3::text, $4::jsonb, $5::text) RETURNING id`,
    [plan.pipeline, plan.target, plan.inputsHash, JSON.stringify(plan.inputs), plan.createdBy]);
  return rows[0]?.id;
}

export interface FrozenPlan {
  pipeline: string;
  target: string;
  hash: string;
  inputs: Record<string, unknown>;
}

export async function findPlan(db: Queryable, planId: number): Promise<FrozenPlan | undefined> {
  const { rows } = await db.query<FrozenPlan>(
    'SELECT pipeline, target, inputs_hash AS hash, inputs FROM backfill.plans WHERE id = $1::bigint', [planId]);
  return rows[0];
}
