import { announce, notify } from './announce/announceSteps.js';
import { compare, report } from './file/fileSteps.js';
import { emitRunEvents } from './lineage/emit.js';
import { runStep, type StepBody, type StepContext, type StepOutcome } from './lifecycle/runStep.js';
import type { CompanionClaim } from './lifecycle/stepClaims.js';
import type { StepRef } from './lifecycle/stepGraph.js';
import { claimSmallStages, moveWatermark, publish, stage } from './recompute/recomputeSteps.js';
import { replay } from './retrigger/replayStep.js';

// The procedure: each kind of step and the body that does it, where the step lives in the procedure (announce,
// recompute, retrigger, file). The order they run in is the step graph's (src/core/lifecycle/stepGraph.ts); how
// one runs (claim, lease, fence, failure) is src/core/lifecycle/runStep.ts.

export { STEP_KINDS, type StepRef } from './lifecycle/stepGraph.js';
export type { StepContext, StepOutcome } from './lifecycle/runStep.js';

const PROCEDURE: Record<StepRef['kind'], StepBody> = {
  announce, stage, publish, watermark: moveWatermark, replay, compare, notify, report,
};

/** The kinds whose first run takes further steps of theirs into its claim: a stage of a small hour, the next small ones. */
const COMPANIONS: Partial<Record<StepRef['kind'], (ctx: StepContext) => CompanionClaim | undefined>> = {
  stage: claimSmallStages,
};

/**
 * Runs one step at least once, with effect exactly once (src/core/lifecycle/runStep.ts); once a claimed run
 * ends, the OpenLineage run event its move made due (START, COMPLETE, FAIL) goes out, which never throws.
 */
export function executeStep(ctx: StepContext, ref: StepRef, options: { finalAttempt?: boolean } = {}): Promise<StepOutcome> {
  const companions = COMPANIONS[ref.kind]?.(ctx);
  return runStep(ctx, ref, PROCEDURE[ref.kind], { ...options, afterStep: () => emitRunEvents(ctx, ref.backfillId), ...(companions ? { companions } : {}) });
}
