import { z } from 'zod';

/**
 * A button's or a modal's value as Slack sends it back: JSON the bot wrote, or a refusal (`not JSON`). What it
 * must hold is the caller's schema, piped after this one; a value is never trusted beyond naming what was clicked.
 */
export const jsonText = z.string().transform((value, issue) => {
  try {
    return JSON.parse(value) as unknown;
  } catch {
    issue.addIssue({ code: 'custom', message: 'not JSON' });
    return z.NEVER;
  }
});
