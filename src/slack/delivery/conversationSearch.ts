import type { webApi } from '@slack/bolt';

type WebClient = webApi.WebClient;

/** A message as conversations.history and conversations.replies list it (the fields a lookup reads). */
export type ListedMessage =
  | NonNullable<webApi.ConversationsRepliesResponse['messages']>[number]
  | NonNullable<webApi.ConversationsHistoryResponse['messages']>[number];

/** Messages per page: Slack recommends no more than 200 at a time. */
const PAGE_LIMIT = 200;
/**
 * Pages read before the lookup gives up (200,000 messages): only a runaway cursor gets that far, and giving up
 * fails the attempt (retried) instead of posting, so a message is never sent twice because a search stopped.
 */
const MAX_PAGES = 1000;

/**
 * The first message of a thread (conversations.replies, oldest first) or of a conversation
 * (conversations.history, newest first) that `match` recognises, whatever the length: page after page by
 * `response_metadata.next_cursor` until it is found or the collection ends. A message a lost answer left
 * behind is reply 101 of a busy incident thread as easily as the first one.
 */
export async function findInConversation<T>(
  client: WebClient,
  where: { channel: string; threadTs?: string | undefined; includeMetadata?: boolean },
  match: (message: ListedMessage) => T | undefined,
): Promise<T | undefined> {
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PAGES; page += 1) {
    const common = { channel: where.channel, limit: PAGE_LIMIT, ...(cursor ? { cursor } : {}), ...(where.includeMetadata ? { include_all_metadata: true } : {}) };
    const answer = where.threadTs
      ? await client.conversations.replies({ ...common, ts: where.threadTs })
      : await client.conversations.history(common);
    for (const message of answer.messages ?? []) {
      const found = match(message);
      if (found !== undefined) return found;
    }
    cursor = answer.response_metadata?.next_cursor || undefined;
    if (!cursor) return undefined;
  }
  throw new Error(`${where.threadTs ? 'the thread' : 'the conversation'} ${where.channel} has more than ${MAX_PAGES * PAGE_LIMIT} messages; the lookup stops here and the attempt will be retried`);
}
