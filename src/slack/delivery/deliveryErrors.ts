import { webApi } from '@slack/bolt';
import { BackfillError, ErrorCode } from '../../errors.js';

// Which Slack answers mean "this message will never be delivered", and how they become facts. Slack answers
// these as ok:false (WebAPIPlatformError, error.data.error); the Web API client does not retry them, and
// neither should the step: a retry would get the same answer until someone changes the user or the channel.

/** Slack's error → what it means, in words an operator can act on. */
const PERMANENT_SLACK_ERRORS: ReadonlyMap<string, string> = new Map([
  ['user_not_found', 'no such user in this workspace, or the bot cannot see them'],
  ['users_not_found', 'no such user in this workspace, or the bot cannot see them'],
  ['invalid_users', 'the user ID is not valid'],
  ['account_inactive', 'the account is deactivated'],
  ['user_disabled', 'the account is disabled'],
  ['cannot_dm_bot', 'the ID belongs to a bot, and bots cannot be sent direct messages'],
  ['messages_tab_disabled', "the app's Messages tab is turned off, so it cannot send direct messages"],
  ['channel_not_found', 'the channel does not exist or the bot cannot see it'],
  ['is_archived', 'the channel is archived'],
  ['not_in_channel', 'the bot is not a member of the channel (invite it with /invite @backfill-bot)'],
  ['restricted_action', 'a workspace setting forbids the bot to post there'],
]);

/** Where a message was going, for the sentence and the details of the error. */
export type Recipient = { user: string } | { channel: string };

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;

/** Slack's `error` string when `error` is an ok:false answer of the Web API, otherwise undefined. */
export function slackPlatformError(error: unknown): string | undefined {
  if (!isRecord(error) || error.code !== webApi.ErrorCode.PlatformError || !isRecord(error.data)) return undefined;
  return typeof error.data.error === 'string' ? error.data.error : undefined;
}

/** Seconds Slack asked us to wait when it answered 429 (only with rejectRateLimitedCalls), otherwise undefined. */
export function rateLimitedFor(error: unknown): number | undefined {
  if (!isRecord(error) || error.code !== webApi.ErrorCode.RateLimitedError) return undefined;
  return typeof error.retryAfter === 'number' ? error.retryAfter : undefined;
}

/** True when Slack answered and so certainly posted nothing (ok:false, or 429). */
export function answeredWithoutPosting(error: unknown): boolean {
  return slackPlatformError(error) !== undefined || rateLimitedFor(error) !== undefined;
}

/**
 * A permanent Slack error as a BackfillError with code `undeliverable` and `details.slackError`; anything else
 * (5xx, a timeout, a lost connection, a rate limit) unchanged, for the job to retry.
 */
export function asUndeliverable(error: unknown, recipient: Recipient, intent?: string): unknown {
  const slackError = slackPlatformError(error);
  const meaning = slackError === undefined ? undefined : PERMANENT_SLACK_ERRORS.get(slackError);
  if (slackError === undefined || meaning === undefined) return error;
  const to = 'user' in recipient ? `user <@${recipient.user}>` : `channel <#${recipient.channel}>`;
  const what = intent === undefined ? 'a message' : `the message ${intent}`;
  return new BackfillError(
    ErrorCode.Undeliverable,
    `Slack cannot deliver ${what} to ${to}: it answered ${slackError} (${meaning}). Retrying will not help until that changes.`,
    { cause: error, details: { slackError, ...recipient, ...(intent === undefined ? {} : { intent }) } },
  );
}
