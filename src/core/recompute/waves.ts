import type { Queryable } from '../../db/pool.js';
import { assignWaves } from '../../db/targets.js';

// Canary and waves: the order a backfill's partitions are published in, so that a correction nobody predicted
// stops after one partition, not after all of them.
//
//   canary   the first partition by hour (wave 0), published alone;
//   waves    the others, WAVE_SIZE at a time (wave 1, 2, …), each published only once every partition of every
//            earlier wave is (the step graph's 'earlier waves' rule: src/core/lifecycle/stepGraph.ts, as SQL in
//            src/db/steps.ts);
//   a pause  a partition whose publish finds it outside its announced envelope pauses the backfill in that
//            publish's transaction (src/core/recompute/stagePublish.ts pauseForBreach), so the next wave never
//            starts until an operator continues, stops or rolls back.
//
// Stages are not held back by waves, and a publish does not wait for every stage: it runs once its own stage is
// done and every earlier wave is published (the step graph's 'own stage' rule), so the canary publishes while
// later hours are still staging, and a canary the plan did not predict pauses the backfill before the rest is
// staged. On the queue a publish goes ahead of the stages waiting (src/queue/stepQueue.ts). A publish by swap
// does too: a stage by swap holds no lock on the target its catalog window needs (src/core/lifecycle/stepGraph.ts).

/** Gives each of the backfill's partitions its wave, when its gate opens and its steps are written. */
export async function planWaves(tx: Queryable, backfillId: number, waveSize: number): Promise<void> {
  await assignWaves(tx, backfillId, waveSize);
}
