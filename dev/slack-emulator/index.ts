// The Slack emulator as the tests and the demo use it: the Web API stand-in (emulator.ts) and the signed requests
// that drive the real Bolt receiver (requests.ts). It lives in dev/ rather than test/support because the demo
// drives Slack through it as the tests do, and the demo runs without vitest.

export { startSlackEmulator, type PostedMessage, type SlackEmulator } from './emulator.js';
export type { RecordedCall } from './state.js';
export {
  postBlockAction, postEvent, postShortcut, postSlashCommand, postViewSubmission, signSlackBody, type EventPostOptions, type SignedPostOptions, type SubmittedView,
} from './requests.js';
