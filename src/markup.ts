// Outside text (a reason, a job name, a display name, an answer from another system) made safe for where it is
// shown. Neutral, so that the core's sentences (a refusal naming what was typed) and the views use the same
// rules. Pieces are escaped, never whole messages: the bot's own mentions and links must stay live.

// C0 and C1 controls but tab and newline, DEL, and the Unicode bidirectional embeddings, overrides and isolates
// (text that reads differently from what it holds).
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** Half of a UTF-16 pair with no other half: not a character; PostgreSQL refuses it in text and JSON. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** `text` without control characters (but newline and tab) and without lone surrogates: what a terminal may show. */
export function terminalText(text: string): string {
  return text.replace(CONTROL, '').replace(LONE_SURROGATE, '\ufffd');
}

/**
 * Outside text in Slack's markup: `&`, `<` and `>` as Slack's entities (the three its docs say to escape), so
 * nothing in it can become a broadcast (<!channel>, <!here>, <!subteam^…>), a mention or a link; its backticks
 * as a look-alike (U+02CB), so that a ``` in a name cannot close the code block it is shown in, nor one of its
 * backticks pair with one of the bot's and turn the rest of a sentence into code; and no control characters.
 * Slack shows the entities as the characters they stand for.
 */
export function slackText(text: string): string {
  // Inside a code span or block too: its backticks are defused, so it can neither close the span nor open one.
  return terminalText(text).replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;').replaceAll('`', '\u02cb');
}

/** Slack's entities back to the characters: for a terminal showing a sentence written in Slack's markup. */
export function unescapeSlack(text: string): string {
  return text.replaceAll('&lt;', '<').replaceAll('&gt;', '>').replaceAll('&amp;', '&');
}

/** Whether `text` holds half of a UTF-16 pair with no other half (which has no UTF-8 form, so no place in text or JSON). */
export function hasLoneSurrogate(text: string): boolean {
  return text.search(LONE_SURROGATE) >= 0;
}

/** The character at code unit `at` as Unicode names it in a sentence: U+001B. */
export function codePointLabel(text: string, at: number): string {
  return `U+${(text.codePointAt(at) ?? 0).toString(16).toUpperCase().padStart(4, '0')}`;
}

/** Where the first character that cannot be stored or shown is (NUL, a control character, a lone surrogate), or -1. */
export function firstUnstorable(text: string): number {
  const control = text.replace(/[\t\n\r]/g, ' ').search(CONTROL);
  const surrogate = text.search(LONE_SURROGATE);
  if (control < 0) return surrogate;
  return surrogate < 0 ? control : Math.min(control, surrogate);
}

/** `text` as it can be stored whatever it held: control characters dropped, lone surrogates replaced (a refusal's record of what was typed). */
export function storableText(text: string): string {
  return terminalText(text.replace(/[\t\n\r]/g, ' '));
}

/** Longest a word someone typed is repeated in a refusal: enough to recognise it, never a wall of it. */
const TYPED_SHOWN = 120;

/**
 * What someone typed, repeated in a sentence the bot writes in Slack's markup (a refusal naming the word that was
 * wrong): escaped, and bounded saying how much was left out. A terminal shows such a sentence through
 * fromSlackMarkup (src/views/text.ts), which turns the entities back into the characters typed.
 */
export function typedText(text: string): string {
  const shown = text.length <= TYPED_SHOWN ? text : `${text.slice(0, TYPED_SHOWN)}… (${text.length - TYPED_SHOWN} more characters not shown)`;
  return slackText(shown);
}
