// What is said of a backfill whose catalog changed behind the bot's back (frozen.ts): in its paused reason and
// timeline, in a refused continue, and in the status and reconciliation, which tell such a pause from a
// partition outside its envelope by the backfill's paused_for. Pure: the views read it as well as the core.

/** The frozen fields the live catalog no longer holds, of one backfill. */
export interface CatalogChangeFacts {
  backfillId: number;
  pipeline: string;
  /** As people call them: step query, shard rule, key columns, re-trigger of <consumer>, … */
  changed: readonly string[];
}

/**
 * What changed, what was held back because of it (`halted`: nothing more is published, a consumer is not
 * re-triggered, a continue is refused), and the two ways on: the catalog put back as it was announced, then a
 * continue; or an end to this backfill and a new one, which announces what the catalog says now.
 */
export function catalogChangedSentence(change: CatalogChangeFacts, halted: string): string {
  return `The catalog of ${change.pipeline} changed since backfill #${change.backfillId} was announced (${change.changed.join(', ')}): ${halted}. ` +
    `Put it back as announced (apply the catalog file it was started with), then \`continue ${change.backfillId} <reason>\`; ` +
    'or stop it, or roll it back, and start a new one.';
}

/** Whether the backfill is paused because its catalog changed (rather than for a partition outside its envelope). */
export function isCatalogPause(backfill: { state: string; pausedFor: string | null }): boolean {
  return backfill.state === 'paused' && backfill.pausedFor === 'catalog';
}
