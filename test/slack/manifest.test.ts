// Both app manifests are valid v1 manifests (schema from slackapi/manifest-schema, see schemas/README.md), the
// HTTP one points every request URL at the Bolt endpoint, the Socket Mode one has none, and the bot scopes are
// exactly the ones the bot needs.

import { readFileSync } from 'node:fs';
import { Ajv, type ErrorObject } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';

// ajv-formats is CommonJS with `exports.default`; under NodeNext the default import is the module object.
const addFormats = addFormatsModule.default;

const BOT_SCOPES = [
  'commands',
  'chat:write',
  'im:write',
  'usergroups:read',
  'app_mentions:read',
  'im:history',
  'channels:history',
  'groups:history',
  'files:write',
];
const BOT_EVENTS = ['app_home_opened', 'app_mention', 'message.im'];
const EVENTS_URL = 'https://backfill-bot.example.com/slack/events';

const root = new URL('../../', import.meta.url);
const readJson = (path: string): unknown => JSON.parse(readFileSync(new URL(path, root), 'utf8')) as unknown;
const readYaml = (path: string): unknown => parse(readFileSync(new URL(path, root), 'utf8')) as unknown;

interface Manifest {
  display_information: { name: string; description?: string; long_description?: string };
  features: {
    app_home: Record<string, boolean>;
    bot_user: { display_name: string; always_online?: boolean };
    slash_commands: { command: string; url?: string; description: string; usage_hint?: string; should_escape?: boolean }[];
  };
  oauth_config: { scopes: { bot: string[] } };
  settings: {
    event_subscriptions: { request_url?: string; bot_events: string[] };
    interactivity: { is_enabled: boolean; request_url?: string };
    socket_mode_enabled?: boolean;
  };
}

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const validate = ajv.compile(readJson('schemas/slack-manifest.schema.1.0.0.json') as object);

function schemaErrors(document: unknown): ErrorObject[] {
  return validate(document) ? [] : [...(validate.errors ?? [])];
}

describe.each([
  { file: 'manifest.yml', socket: false },
  { file: 'manifest.socket.yml', socket: true },
])('$file', ({ file, socket }) => {
  const document = readYaml(file);
  const manifest = document as Manifest;

  it('is valid against the v1 manifest schema', () => {
    expect(schemaErrors(document)).toEqual([]);
  });

  it('describes backfill-bot with its App Home, bot user and /backfill command', () => {
    expect(manifest.display_information.name).toBe('Backfill Bot');
    expect(manifest.display_information.long_description?.length).toBeGreaterThanOrEqual(175);
    expect(manifest.features.bot_user).toEqual({ display_name: 'backfill-bot', always_online: true });
    expect(manifest.features.app_home).toEqual({
      home_tab_enabled: true,
      messages_tab_enabled: true,
      messages_tab_read_only_enabled: false,
    });
    expect(manifest.features.slash_commands).toHaveLength(1);
    expect(manifest.features.slash_commands[0]).toMatchObject({
      command: '/backfill',
      usage_hint: 'plan|start|status|override|cancel|help <pipeline> <night YYYY-MM-DD | from..to> <reason>',
      should_escape: false,
    });
  });

  it('asks for exactly the bot scopes the bot uses and subscribes to its three events', () => {
    expect(manifest.oauth_config.scopes.bot).toEqual(BOT_SCOPES);
    expect(manifest.settings.event_subscriptions.bot_events).toEqual(BOT_EVENTS);
    expect(manifest.settings.interactivity.is_enabled).toBe(true);
  });

  if (socket) {
    it('uses Socket Mode and has no request URLs', () => {
      expect(manifest.settings.socket_mode_enabled).toBe(true);
      expect(manifest.features.slash_commands[0]?.url).toBeUndefined();
      expect(manifest.settings.event_subscriptions.request_url).toBeUndefined();
      expect(manifest.settings.interactivity.request_url).toBeUndefined();
      expect(JSON.stringify(document)).not.toMatch(/https?:\/\//);
    });
  } else {
    it('uses HTTP mode with all three request URLs on the Bolt endpoint', () => {
      expect(manifest.settings.socket_mode_enabled).toBe(false);
      expect(manifest.features.slash_commands[0]?.url).toBe(EVENTS_URL);
      expect(manifest.settings.event_subscriptions.request_url).toBe(EVENTS_URL);
      expect(manifest.settings.interactivity.request_url).toBe(EVENTS_URL);
    });
  }
});

describe('the manifest schema check', () => {
  it('catches a broken manifest (so a pass above means something)', () => {
    const broken = structuredClone(readYaml('manifest.yml')) as Manifest & Record<string, unknown>;
    broken.display_information.long_description = 'too short';
    broken.features.slash_commands[0] = { command: 'backfill', description: '' };
    broken.settings.interactivity = { request_url: 'ftp://nope' } as Manifest['settings']['interactivity'];
    broken.unknown_top_level = true;
    const errors = schemaErrors(broken).map((error) => `${error.instancePath} ${error.keyword}`);
    expect(errors).toEqual(
      expect.arrayContaining([
        '/display_information/long_description minLength',
        '/features/slash_commands/0/command pattern',
        '/features/slash_commands/0/description minLength',
        '/settings/interactivity required',
        '/settings/interactivity/request_url pattern',
        ' additionalProperties',
      ]),
    );
  });
});
