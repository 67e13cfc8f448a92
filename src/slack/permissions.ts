import type { webApi } from '@slack/bolt';
import type { Config } from '../config.js';
import type { CommandSpec } from '../commands/table.js';
import { authorize } from '../core/authorization.js';
import { BackfillError, ErrorCode } from '../errors.js';

const GROUP_CACHE_MS = 60_000;

/**
 * Who may plan, start, override and cancel: the users in BACKFILL_OPERATORS and, when set, the members of
 * BACKFILL_OPERATOR_GROUP (read from Slack, cached for a minute); where: BACKFILL_CHANNELS when set.
 */
export class OperatorPolicy {
  private group: { members: Set<string>; at: number } | undefined;

  constructor(private readonly config: Config, private readonly client: webApi.WebClient) {}

  /**
   * Refuses a command the user may not give here: operators' commands only from BACKFILL_CHANNELS (when set),
   * and by the rule of the command table, decided in src/core/authorization.ts like the CLI's.
   */
  async authorize(user: string, channel: string, command: CommandSpec): Promise<void> {
    if (command.rule !== 'operator') return authorize({ actor: user, operator: false }, command.rule, command.action);
    if (this.config.BACKFILL_CHANNELS.length > 0 && !this.config.BACKFILL_CHANNELS.includes(channel)) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `Backfills are run only from ${this.config.BACKFILL_CHANNELS.map((c) => `<#${c}>`).join(', ')}; ask again there.`);
    }
    return authorize({ actor: user, operator: await this.isOperator(user) }, command.rule, command.action);
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
