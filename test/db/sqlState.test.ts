// The SQLSTATEs the code decides on (src/db/sqlState.ts), as real PostgreSQL sends them: each name is checked
// against an error the server itself raised, so a code mistyped in the table fails here, not on the night.

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasSqlState, SqlState, sqlStateOf } from '../../src/db/sqlState.js';
import { withClient, withTransaction } from '../../src/db/pool.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

describe('SQLSTATEs by name', () => {
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase('empty');
    await db.pool.query(`CREATE SCHEMA s;
      CREATE TABLE s.parent (id int PRIMARY KEY);
      CREATE TABLE s.child (id int REFERENCES s.parent (id), n int CHECK (n > 0));
      CREATE EXTENSION IF NOT EXISTS btree_gist;
      CREATE TABLE s.span (during tstzrange, EXCLUDE USING gist (during WITH &&));
      INSERT INTO s.parent VALUES (1); INSERT INTO s.span VALUES ('[2026-11-15 05:00Z, 2026-11-15 10:00Z)')`);
  });

  afterAll(async () => {
    await db.drop();
  });

  /** The error `work` ended with (undefined when it did not fail). */
  const failed = (work: Promise<unknown>): Promise<unknown> => work.then(() => undefined, (error: unknown) => error);
  /** The error `sql` raises on the server. */
  const raised = (sql: string): Promise<unknown> => failed(db.pool.query(sql));

  it('names what the server raises for a refused row', async () => {
    expect(sqlStateOf(await raised('INSERT INTO s.parent VALUES (1)'))).toBe(SqlState.UniqueViolation);
    expect(sqlStateOf(await raised('INSERT INTO s.child VALUES (2, 1)'))).toBe(SqlState.ForeignKeyViolation);
    expect(sqlStateOf(await raised('INSERT INTO s.child VALUES (1, 0)'))).toBe(SqlState.CheckViolation);
    expect(sqlStateOf(await raised(`INSERT INTO s.span VALUES ('[2026-11-15 09:00Z, 2026-11-15 11:00Z)')`))).toBe(SqlState.ExclusionViolation);
  });

  it('names a lock not granted, a cancelled statement, the two a transaction is tried again on, and a missing grant', async () => {
    await withTransaction(db.pool, async (tx) => {
      await tx.query('LOCK TABLE s.parent IN ACCESS EXCLUSIVE MODE');
      await withClient(db.pool, async (other) => {
        await other.query('BEGIN');
        expect(sqlStateOf(await failed(other.query('LOCK TABLE s.parent IN ACCESS SHARE MODE NOWAIT')))).toBe(SqlState.LockNotAvailable);
        await other.query('ROLLBACK');
      });
    });
    await withClient(db.pool, async (client) => {
      expect(sqlStateOf(await failed(client.query(`SET statement_timeout = 10; SELECT pg_sleep(5)`)))).toBe(SqlState.QueryCanceled);
      await client.query('RESET statement_timeout; SET ROLE pg_read_all_stats');
      expect(sqlStateOf(await failed(client.query('CREATE TABLE s.nope (x int)')))).toBe(SqlState.InsufficientPrivilege);
      await client.query('RESET ROLE');
    });
    // A row changed under a repeatable-read transaction that then writes it.
    await withClient(db.pool, async (reader) => {
      await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM s.parent');
      await db.pool.query('UPDATE s.parent SET id = id WHERE id = 1');
      expect(sqlStateOf(await failed(reader.query('UPDATE s.parent SET id = id WHERE id = 1')))).toBe(SqlState.SerializationFailure);
      await reader.query('ROLLBACK');
    });
    // Two transactions each waiting on the row the other holds: the server ends one of them.
    await db.pool.query('INSERT INTO s.parent VALUES (2)');
    await withClient(db.pool, async (a) => {
      await withClient(db.pool, async (b) => {
        await a.query('BEGIN; SET LOCAL deadlock_timeout = 10; UPDATE s.parent SET id = id WHERE id = 1');
        await b.query('BEGIN; SET LOCAL deadlock_timeout = 10; UPDATE s.parent SET id = id WHERE id = 2');
        const ended = await Promise.all([failed(a.query('UPDATE s.parent SET id = id WHERE id = 2')), failed(b.query('UPDATE s.parent SET id = id WHERE id = 1'))]);
        expect(ended.map(sqlStateOf).filter((state) => state !== undefined)).toEqual([SqlState.DeadlockDetected]);
        await a.query('ROLLBACK');
        await b.query('ROLLBACK');
      });
    });
  });

  it('names the database and login answers', async () => {
    expect(sqlStateOf(await raised(`CREATE DATABASE ${db.name}`))).toBe(SqlState.DuplicateDatabase);
    const elsewhere = (change: (url: URL) => void) => {
      const url = new URL(db.url);
      change(url);
      const client = new pg.Client({ connectionString: url.toString() });
      return failed(client.connect().finally(() => client.end().catch(() => undefined)));
    };
    expect(sqlStateOf(await elsewhere((url) => { url.pathname = `/${db.name}_missing`; }))).toBe(SqlState.InvalidCatalogName);
    expect(sqlStateOf(await elsewhere((url) => { url.username = 'no_such_role_of_backfill_bot'; }))).toBe(SqlState.InvalidAuthorization);
    // InvalidPassword (28P01) needs a server that asks for passwords; this one trusts local logins.
    expect(SqlState.InvalidPassword).toBe('28P01');
  });

  it('answers only for errors the server sent, and for any of the states asked', () => {
    const unique = Object.assign(new Error('duplicate key value'), { code: '23505' });
    expect(hasSqlState(unique, SqlState.UniqueViolation)).toBe(true);
    expect(hasSqlState(unique, SqlState.SerializationFailure, SqlState.DeadlockDetected)).toBe(false);
    expect(hasSqlState(Object.assign(new Error('deadlock'), { code: '40P01' }), SqlState.SerializationFailure, SqlState.DeadlockDetected)).toBe(true);
    // A Node errno, a number, no error at all: none is a SQLSTATE.
    expect(sqlStateOf(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }))).toBe('ECONNREFUSED');
    expect(hasSqlState(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }), SqlState.UniqueViolation)).toBe(false);
    expect(sqlStateOf({ code: 23505 })).toBeUndefined();
    expect(sqlStateOf(undefined)).toBeUndefined();
    expect(sqlStateOf('23505')).toBeUndefined();
  });
});
