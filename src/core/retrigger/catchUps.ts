import { insertCatchUp, insertCatchUpNotice, listUntoldNotices, markNoticeTold } from '../../db/catchUps.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction } from '../../db/pool.js';
import type { Pipeline } from '../../db/pipelines.js';
import { listReadersByDay } from '../../db/readLog.js';
import type { EngineContext } from '../context.js';
import { totalOverDays } from '../../db/partitions.js';
import { readReportFigure } from '../../db/pipelineSql.js';
import type { StepContext } from '../procedure.js';

/**
 * The normal run has just filled hours that readers read while they were missing (night 9). Records it like
 * a backfill's diff: one catch-up, and per stale reader and day what its report showed and what the table
 * holds now. The notices are delivered later by a worker, so a tick run from the CLI still reaches Slack.
 */
export async function recordCatchUp(ctx: EngineContext, input: { pipeline: Pipeline; filled: Date[]; actor: string }): Promise<number | undefined> {
  const first = input.filled[0];
  const last = input.filled.at(-1);
  if (!first || !last) return undefined;
  return withTransaction(ctx.pool, async (tx) => {
    const readers = await listReadersByDay(tx, input.pipeline.name, input.filled);
    if (readers.length === 0) return undefined;
    const id = await insertCatchUp(tx, { pipeline: input.pipeline.name, firstHour: first, lastHour: last, partitions: input.filled.length, ranBy: input.actor });
    if (id === undefined) throw new Error('catch-up insert returned no id');
    for (const reader of readers) {
      const before = reader.reportTotalSql ? await readReportFigure(tx, reader.reportTotalSql, reader.period) : null;
      const after = await totalOverDays(tx, input.pipeline, [reader.period]);
      await insertCatchUpNotice(tx, id, { ...reader, reportBefore: before, totalAfter: after });
    }
    await recordEvent(tx, { actor: input.actor, kind: 'caught_up', detail: { catchUp: id, pipeline: input.pipeline.name, partitions: input.filled.length, readers: readers.length } });
    return id;
  });
}

/** Delivers one stale-reader notice once; a repeat delivery finds it told and does nothing. */
export async function tellStaleReader(ctx: StepContext, key: { catchUpId: number; consumer: string; period: string }): Promise<boolean> {
  const notice = (await listUntoldNotices(ctx.pool, key.catchUpId)).find((n) => n.consumer === key.consumer && n.period === key.period);
  if (!notice) return false;
  await ctx.messenger.directMessage(notice.owner, { kind: 'stale_reader', notice }, `cu${key.catchUpId}:${key.consumer}:${key.period}`);
  await withTransaction(ctx.pool, async (tx) => {
    await markNoticeTold(tx, key);
    await recordEvent(tx, { actor: 'backfill-bot', kind: 'stale_readers_told', detail: { catchUp: key.catchUpId, consumer: key.consumer, owner: notice.owner, period: key.period } });
  });
  return true;
}
