import type { Queryable } from './pool.js';

// Who may sign which report's figure (backfill.signers).

export async function listSigners(db: Queryable, report: string): Promise<string[]> {
  const { rows } = await db.query<{ signer: string }>('SELECT signer FROM backfill.signers WHERE report = $1::text ORDER BY signer', [report]);
  return rows.map((row) => row.signer);
}

/** The signers of one report, or (null) of every report, by report. */
export async function listReportSigners(db: Queryable, report: string | null): Promise<{ report: string; signer: string }[]> {
  const { rows } = await db.query<{ report: string; signer: string }>(
    'SELECT report, signer FROM backfill.signers WHERE $1::text IS NULL OR report = $1::text ORDER BY report, signer', [report]);
  return rows;
}

export async function insertSigner(db: Queryable, signer: { report: string; signer: string; addedBy: string }): Promise<void> {
  await db.query('INSERT INTO backfill.signers (report, signer, added_by) VALUES ($1::text, $2::text, $3::text) ON CONFLICT DO NOTHING',
    [signer.report, signer.signer, signer.addedBy]);
}

/** True when they were a signer of it. */
export async function deleteSigner(db: Queryable, report: string, signer: string): Promise<boolean> {
  const removed = await db.query('DELETE FROM backfill.signers WHERE report = $1::text AND signer = $2::text', [report, signer]);
  return (removed.rowCount ?? 0) > 0;
}
