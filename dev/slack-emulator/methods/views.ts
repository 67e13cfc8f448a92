// views.*: App Home publishes (kept for the transcript) and modals (answered, not shown).

import { isRec, str, type Rec } from '../params.js';
import type { EmulatorState, HomeEntry } from '../state.js';
import type { MethodHandler } from './index.js';

function viewsPublish(state: EmulatorState, params: Rec): Rec {
  const user = str(params.user_id);
  if (!user) return { ok: false, error: 'invalid_arguments' };
  if (!isRec(params.view)) return { ok: false, error: 'invalid_arguments' };
  const existing = state.entries.find((entry): entry is HomeEntry => entry.kind === 'home' && entry.user === user);
  if (existing) {
    existing.view = params.view;
    existing.publishes += 1;
  } else {
    state.entries.push({ kind: 'home', user, view: params.view, publishes: 1 });
  }
  const viewNumber = state.nextViewNumber();
  return {
    ok: true,
    view: { ...params.view, id: `VHOME${user}`, team_id: state.teamId, hash: `${Date.now()}.${viewNumber}` },
  };
}

/** views.open, views.push and views.update: nothing is shown, the view comes back with an id and a hash. */
function viewsShow(state: EmulatorState, params: Rec): Rec {
  if (!isRec(params.view)) return { ok: false, error: 'invalid_arguments' };
  const viewNumber = state.nextViewNumber();
  const id = str(params.view_id) ?? `V${String(viewNumber).padStart(8, '0')}`;
  return { ok: true, view: { ...params.view, id, team_id: state.teamId, hash: `${Date.now()}.${viewNumber}` } };
}

export const VIEWS_METHODS: Record<string, MethodHandler> = {
  'views.publish': viewsPublish,
  'views.open': viewsShow,
  'views.push': viewsShow,
  'views.update': viewsShow,
};
