// The one redaction's two nets, each on its own: the values loadConfig registers (those the leak hunt does not
// plant: the passwords of the database, demo database, Redis and OpenLineage URLs, and the LINEAGE_TOKENS
// tokens), and the shapes of credentials nobody configured (Basic and Token values, Slack tokens of every kind).
// Each value is quoted alone, never inside its URL, so that only its registration can remove it.

import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { redact, REDACTED } from '../../src/redaction.js';

describe('the values loadConfig registers', () => {
  const passwords = {
    database: 'Pg@ss:w0rd-db-41c7',
    demo: 'demo-pw-9e2b61',
    redis: 'redis-pw-5d08aa',
    openLineage: 'marquez-pw-3f71c0',
  };
  const lineageToken = 'dbt-sender-token-0123456789abcdef';
  loadConfig({
    DATABASE_URL: `postgres://backfill:${encodeURIComponent(passwords.database)}@db.internal:5432/backfill_bot`,
    DEMO_DATABASE_URL: `postgres://backfill:${passwords.demo}@db.internal:5432/backfill_bot_demo`,
    REDIS_URL: `redis://:${passwords.redis}@cache.internal:6379/0`,
    OPENLINEAGE_URL: `https://backfill:${passwords.openLineage}@marquez.internal/api/v1/lineage`,
    LINEAGE_TOKENS: `dbt:dbt-prod:${lineageToken}`,
  });

  it('removes every URL password, as written and as the server receives it, and every LINEAGE_TOKENS token, quoted alone', () => {
    const quoted = [
      `password authentication failed for user "backfill" (tried "${passwords.database}")`,
      `the URL held ${encodeURIComponent(passwords.database)}`,
      `demo: ${passwords.demo}; redis AUTH ${passwords.redis}; marquez: ${passwords.openLineage}`,
      `the dbt sender posted with ${lineageToken}`,
    ].join('\n');
    const out = redact(quoted);
    for (const value of [...Object.values(passwords), encodeURIComponent(passwords.database), lineageToken]) expect(out).not.toContain(value);
    // What was around them stays, to be read.
    expect(out).toContain(`password authentication failed for user "backfill" (tried "${REDACTED}")`);
    expect(out).toContain(`redis AUTH ${REDACTED}`);
  });
});

describe('the shapes, whoever the credential belongs to', () => {
  it.each([
    ['a Basic value in a header', 'proxy answered 407: Proxy-Authorization: Basic dXNlcjpodW50ZXIy', 'dXNlcjpodW50ZXIy', 'Basic [redacted]'],
    ['a Basic value in lower case', 'sent basic Zm9vOmJhcg== upstream', 'Zm9vOmJhcg==', 'basic [redacted]'],
    ['a Token value', 'retry with Token 9f3c2a71b0e4 please', '9f3c2a71b0e4', 'Token [redacted]'],
    ['a Slack user token', 'leaked xoxp-1111-2222-3333-a1b2c3d4e5 in a job log', 'xoxp-1111-2222-3333-a1b2c3d4e5', 'leaked [redacted] in'],
    ['a Slack refresh token', 'refresh xoxe-1-My0xLTEyMzQ1Ng', 'xoxe-1-My0xLTEyMzQ1Ng', 'refresh [redacted]'],
    ['a Slack app-level token', 'socket mode with xapp-1-A0123-4567-89abcdef', 'xapp-1-A0123-4567-89abcdef', 'with [redacted]'],
  ])('removes %s, configured nowhere', (_name, text, secret, kept) => {
    const out = redact(text);
    expect(out).not.toContain(secret);
    expect(out).toContain(kept);
  });
});
