import pg from 'pg';

// What the database role the bot connects as may do beyond owning its own databases and schemas. The bot needs
// nothing more (docs/operating.md, "The database role"); a role that can read or write the server's files or run
// programs as its OS user turns any SQL the bot runs (a catalog's re-trigger statement, a pipeline's step) into that.

/** The predefined roles that reach outside the database: the server's files, and programs run as its OS user. */
const SERVER_ACCESS_ROLES = ['pg_read_server_files', 'pg_write_server_files', 'pg_execute_server_program'] as const;

export interface RolePowers {
  role: string;
  superuser: boolean;
  /** Which of SERVER_ACCESS_ROLES the role holds, directly or through another role. */
  serverAccess: string[];
}

/** Reads the powers of the role `databaseUrl` logs in as (one short connection). */
export async function readRolePowers(databaseUrl: string): Promise<RolePowers> {
  const client = new pg.Client({ connectionString: databaseUrl, application_name: 'backfill-bot-check', connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rows } = await client.query<{ role: string; superuser: boolean; server_access: string[] }>(
      `SELECT current_user AS role, r.rolsuper AS superuser,
              ARRAY(SELECT granted.rolname::text FROM pg_roles granted
                    WHERE granted.rolname = ANY ($1::text[]) AND pg_has_role(current_user, granted.oid, 'MEMBER')
                    ORDER BY granted.rolname) AS server_access
       FROM pg_roles r WHERE r.rolname = current_user`, [[...SERVER_ACCESS_ROLES]]);
    const row = rows[0];
    return { role: row?.role ?? '', superuser: row?.superuser ?? false, serverAccess: row?.server_access ?? [] };
  } finally {
    await client.end().catch(() => undefined);
  }
}
