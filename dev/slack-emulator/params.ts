// The arguments of a Web API call as @slack/web-api sends them (form fields, JSON, multipart), read loosely:
// a test may send anything, and the emulator answers as Slack would rather than throw.

export type Rec = Record<string, unknown>;

export const isRec = (value: unknown): value is Rec => typeof value === 'object' && value !== null && !Array.isArray(value);

export function str(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return undefined;
}

export const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);

/** A boolean argument as web-api sends it: true in JSON, 'true' (or '1') in a form. */
export const flag = (value: unknown): boolean => value === true || value === 'true' || value === '1';

/** Posting to a user ID lands in the bot's DM with that user, as on Slack; the answer carries the D… id. */
export const conversationFor = (channel: string): string => (/^[UW][A-Z0-9]+$/.test(channel) ? `D${channel}` : channel);
