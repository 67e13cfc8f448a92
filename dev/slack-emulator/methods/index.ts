// The Web API methods the emulator answers: one handler per method, grouped by family, dispatched by name.

import type { Rec } from '../params.js';
import type { EmulatorState } from '../state.js';
import { CHAT_METHODS } from './chat.js';
import { CONVERSATIONS_METHODS } from './conversations.js';
import { FILES_METHODS } from './files.js';
import { VIEWS_METHODS } from './views.js';
import { WORKSPACE_METHODS } from './workspace.js';

/** One method: the call's arguments in, the JSON body Slack would answer with out. */
export type MethodHandler = (state: EmulatorState, params: Rec) => Rec;

/** By method name; a Map, so a name like 'constructor' finds nothing. Any method not here answers { ok: true }. */
const METHODS = new Map<string, MethodHandler>(
  Object.entries({
    ...WORKSPACE_METHODS,
    ...CONVERSATIONS_METHODS,
    ...CHAT_METHODS,
    ...VIEWS_METHODS,
    ...FILES_METHODS,
  }),
);

export function handleMethod(state: EmulatorState, method: string, params: Rec): Rec {
  const handler = METHODS.get(method);
  return handler ? handler(state, params) : { ok: true };
}
