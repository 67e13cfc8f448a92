/** A Slack member id (U… or W…): what the bot keeps for a person, and what anything else (cli:…@host) is not. */
export function isSlackUserId(id: string): boolean {
  return /^[UW][A-Z0-9]+$/.test(id);
}
