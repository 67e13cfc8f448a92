import type { EngineContext } from '../core/context.js';
import { readCatalogRows } from '../db/catalog.js';
import { findPlan } from '../db/plans.js';

// What a form to start a backfill is filled from, as facts: the catalog's pipelines (the select offers them) and
// what a frozen plan previewed (a plan id stands for its pipeline and target). The form's submissions run the
// plan and start use cases of run.ts like the typed command; these only read.

export interface PipelineChoice {
  name: string;
  targetTable: string;
}

/** The pipelines of the catalog, by name. */
export async function listPipelines(ctx: EngineContext): Promise<PipelineChoice[]> {
  const { pipelines } = await readCatalogRows(ctx.pool);
  return pipelines.map((p) => ({ name: p.name, targetTable: p.targetTable }));
}

/** The pipeline and target a frozen plan previewed, or undefined when there is no such plan. */
export async function frozenPlanTarget(ctx: EngineContext, planId: number): Promise<{ pipeline: string; target: string } | undefined> {
  const plan = await findPlan(ctx.pool, planId);
  return plan ? { pipeline: plan.pipeline, target: plan.target } : undefined;
}
