import type { webApi } from '@slack/bolt';
import type { Config } from '../config.js';
import { BackfillError, ErrorCode } from '../errors.js';

const GROUP_CACHE_MS = 60_000;

/**
 * Who may plan, start, override and cancel: the users in BACKFILL_OPERATORS and, when set, the members of
 * BACKFILL_OPERATOR_GROUP (read from Slack, cached for a minute); where: BACKFILL_CHANNELS when set.
 */
export class OperatorPolicy {
  private group: { members: Set<string>; at: number } | undefined;

  constructor(private readonly config: Config, private readonly client: webApi.WebClient) {}

  async requireOperator(user: string, channel: string, action: string): Promise<void> {
    if (this.config.BACKFILL_CHANNELS.length > 0 && !this.config.BACKFILL_CHANNELS.includes(channel)) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `Backfills are run only from ${this.config.BACKFILL_CHANNELS.map((c) => `<#${c}>`).join(', ')}; ask again there.`);
    }
    if (await this.isOperator(user)) return;
    throw new BackfillError(ErrorCode.NotAllowed,
      `<@${user}> is not a backfill operator, so cannot ${action}. Operators are listed in BACKFILL_OPERATORS` +
      `${this.config.BACKFILL_OPERATOR_GROUP ? ' or the operators user group' : ''}; ask one of them, or ask to be added.`);
  }

  async isOperator(user: string): Promise<boolean> {
    if (this.config.BACKFILL_OPERATORS.includes(user)) return true;
    const groupId = this.config.BACKFILL_OPERATOR_GROUP;
    if (!groupId) return false;
    if (!this.group || Date.now() - this.group.at > GROUP_CACHE_MS) {
      const result = await this.client.usergroups.users.list({ usergroup: groupId });
      this.group = { members: new Set(result.users ?? []), at: Date.now() };
    }
    return this.group.members.has(user);
  }
}
