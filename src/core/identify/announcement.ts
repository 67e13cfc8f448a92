import type { AnnouncementFacts } from '../notices.js';

export type { AnnouncementFacts } from '../notices.js';

/**
 * What an owner is told, generated from the consumer row rather than composed by a person: which partitions
 * and why, the signed figures of their own report with who signed them and when, the expected direction and
 * total, when it runs, who asked. Kept with the backfill as the record; src/views/notices.ts words it.
 */
export function announcementFacts(input: AnnouncementFacts): AnnouncementFacts {
  const { reader } = input;
  return {
    ...input,
    reader: {
      consumer: reader.consumer, kind: reader.kind, readDirectly: reader.readDirectly, partitionsRead: reader.partitionsRead,
      dependsOn: reader.dependsOn, notifyRule: reader.notifyRule,
    },
    signed: input.signed.filter((f) => f.report === reader.consumer)
      .map((f) => ({ report: f.report, period: f.period, total: f.total, signedBy: f.signedBy, signedAt: f.signedAt })),
  };
}
