// The workspace around the bot: auth.test (who the bot is) and usergroups.users.list (who a group holds).

import { str, type Rec } from '../params.js';
import { BOT_ID, type EmulatorState } from '../state.js';
import type { MethodHandler } from './index.js';

const TEAM_NAME = 'Harborlight';

function authTest(state: EmulatorState): Rec {
  return {
    ok: true,
    url: 'https://harborlight.slack.com/',
    team: TEAM_NAME,
    user: 'backfill-bot',
    team_id: state.teamId,
    user_id: state.botUserId,
    bot_id: BOT_ID,
    is_enterprise_install: false,
  };
}

function usergroupsUsersList(state: EmulatorState, params: Rec): Rec {
  return { ok: true, users: [...(state.usergroups.get(str(params.usergroup) ?? '') ?? [])] };
}

export const WORKSPACE_METHODS: Record<string, MethodHandler> = {
  'auth.test': authTest,
  'usergroups.users.list': usergroupsUsersList,
};
