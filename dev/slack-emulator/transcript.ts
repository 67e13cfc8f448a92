// The transcript: what a person would have seen, as plain text. One section per channel, response_url and App
// Home, in order of first appearance; each chat.postMessage with its chat.update replacements applied in place,
// rendered from Block Kit (and legacy attachments) to text.

import { isRec, list, str } from './params.js';
import { content, type Content, type Entry, type HomeEntry, type MessageEntry } from './state.js';

// ---- Block Kit to plain text ----------------------------------------------------------------------------

function textOf(value: unknown): string {
  if (typeof value === 'string') return value;
  if (isRec(value)) return str(value.text) ?? '';
  return '';
}

function renderElement(element: unknown): string {
  if (!isRec(element)) return '';
  switch (element.type) {
    case 'button':
      return `[${textOf(element.text)}]`;
    case 'image':
      return `[image: ${str(element.alt_text) ?? ''}]`;
    case 'plain_text':
    case 'mrkdwn':
      return textOf(element);
    case 'overflow':
      return '[…]';
    case 'datepicker':
      return `[${str(element.initial_date) ?? textOf(element.placeholder)} ▾]`;
    case 'checkboxes':
    case 'radio_buttons':
      return list(element.options)
        .map((option) => `( ) ${isRec(option) ? textOf(option.text) : ''}`)
        .join(' ');
    default: {
      const selected = isRec(element.initial_option) ? textOf(element.initial_option.text) : '';
      const label = selected || textOf(element.placeholder) || str(element.type) || 'element';
      return `[${label} ▾]`;
    }
  }
}

function renderRichText(value: unknown): string {
  if (!isRec(value)) return '';
  switch (value.type) {
    case 'text':
      return str(value.text) ?? '';
    case 'link':
      return str(value.text) ?? str(value.url) ?? '';
    case 'user':
      return `<@${str(value.user_id) ?? ''}>`;
    case 'channel':
      return `<#${str(value.channel_id) ?? ''}>`;
    case 'usergroup':
      return `<!subteam^${str(value.usergroup_id) ?? ''}>`;
    case 'emoji':
      return `:${str(value.name) ?? ''}:`;
    case 'broadcast':
      return `<!${str(value.range) ?? ''}>`;
    case 'date':
      return str(value.fallback) ?? '';
    case 'rich_text_list':
      return list(value.elements)
        .map((item) => `• ${renderRichText(item)}`)
        .join('\n');
    default:
      return list(value.elements).map(renderRichText).join('');
  }
}

function renderTableCell(cell: unknown): string {
  if (!isRec(cell)) return '';
  if (cell.type === 'rich_text') return renderRichText(cell);
  return str(cell.text) ?? str(cell.value) ?? '';
}

function renderBlock(block: unknown): string[] {
  if (!isRec(block)) return [];
  switch (block.type) {
    case 'header':
      return [textOf(block.text)];
    case 'section': {
      const lines: string[] = [];
      const text = textOf(block.text);
      const accessory = block.accessory === undefined ? '' : renderElement(block.accessory);
      if (text) lines.push(...text.split('\n'));
      for (const field of list(block.fields)) lines.push(...textOf(field).split('\n'));
      if (accessory) {
        if (lines.length === 0) lines.push(accessory);
        else lines[lines.length - 1] = `${lines[lines.length - 1] ?? ''} ${accessory}`;
      }
      return lines;
    }
    case 'context':
      return [list(block.elements).map(renderElement).join(' ')];
    case 'actions':
      return [list(block.elements).map(renderElement).join(' ')];
    case 'divider':
      return ['----------'];
    case 'image':
      return [`[image: ${str(block.alt_text) ?? ''}]`];
    case 'markdown':
      return (str(block.text) ?? '').split('\n');
    case 'rich_text':
      return renderRichText(block).split('\n');
    case 'input':
      return [`${textOf(block.label)}: ${renderElement(block.element)}`];
    case 'table':
      return list(block.rows).map((row) => list(row).map(renderTableCell).join(' | '));
    default:
      return [`[${str(block.type) ?? 'unknown'} block]`];
  }
}

function renderContent(content: Content): string[] {
  const lines: string[] = [];
  const blocks = list(content.blocks);
  if (blocks.length > 0) {
    for (const block of blocks) lines.push(...renderBlock(block));
  } else if (content.text) {
    lines.push(...content.text.split('\n'));
  }
  for (const attachment of list(content.attachments)) {
    if (!isRec(attachment)) continue;
    const inner: string[] = [];
    const pretext = str(attachment.pretext);
    if (pretext) inner.push(pretext);
    const attachmentBlocks = list(attachment.blocks);
    if (attachmentBlocks.length > 0) {
      for (const block of attachmentBlocks) inner.push(...renderBlock(block));
    } else {
      const title = str(attachment.title);
      if (title) inner.push(title);
      const text = str(attachment.text) ?? str(attachment.fallback);
      if (text) inner.push(...text.split('\n'));
      for (const field of list(attachment.fields)) {
        if (isRec(field)) inner.push(`${str(field.title) ?? ''}: ${str(field.value) ?? ''}`);
      }
    }
    lines.push(...inner.map((line) => `| ${line}`));
  }
  return lines;
}

const indent = (lines: string[]): string[] => lines.map((line) => (line ? `  ${line}` : ''));

// ---- the entries ----------------------------------------------------------------------------------------

const threadNote = (threadTs: string | undefined): string => (threadTs ? `, in thread ${threadTs}` : '');

function renderMessageEntry(entry: MessageEntry): string[] {
  const notes = [entry.edits > 0 ? `edited ×${entry.edits}` : '', entry.threadTs ? `in thread ${entry.threadTs}` : '']
    .filter(Boolean)
    .join(', ');
  if (entry.deleted) return [`-- ${entry.ts} (deleted)`];
  return [`-- ${entry.ts}${notes ? ` (${notes})` : ''}`, ...indent(renderContent(entry))];
}

function renderEphemeralEntry(entry: Extract<Entry, { kind: 'ephemeral' }>): string[] {
  return [
    `-- ${entry.ts} (ephemeral, only ${entry.user} sees it${threadNote(entry.threadTs)})`,
    ...indent(renderContent(entry)),
  ];
}

function renderFileEntry(entry: Extract<Entry, { kind: 'file' }>): string[] {
  const where = entry.threadTs ? ` (in thread ${entry.threadTs})` : '';
  const lines = [`-- file${entry.files.length > 1 ? 's' : ''} shared${where}`];
  if (entry.comment) lines.push(...indent(entry.comment.split('\n')));
  lines.push(...indent(entry.files.map((file) => `[file: ${file.title} (${file.id})]`)));
  return lines;
}

function renderResponseEntry(entry: Extract<Entry, { kind: 'response' }>): string[] {
  const body = isRec(entry.body) ? entry.body : { text: str(entry.body) ?? '' };
  const flags = [
    str(body.response_type) ?? 'ephemeral',
    body.replace_original === true || body.replace_original === 'true' ? 'replace_original' : '',
    body.delete_original === true || body.delete_original === 'true' ? 'delete_original' : '',
  ]
    .filter(Boolean)
    .join(', ');
  return [`-- reply (${flags})`, ...indent(renderContent(content(body)))];
}

function renderHomeEntry(entry: HomeEntry): string[] {
  const view = isRec(entry.view) ? entry.view : {};
  return [`-- home view (published ×${entry.publishes})`, ...indent(renderContent({ blocks: view.blocks }))];
}

/** The title of the section an entry belongs in, and its lines there. */
function renderEntry(entry: Entry): { title: string; lines: string[] } {
  switch (entry.kind) {
    case 'message':
      return { title: entry.channel, lines: renderMessageEntry(entry) };
    case 'ephemeral':
      return { title: entry.channel, lines: renderEphemeralEntry(entry) };
    case 'file':
      return { title: entry.channel, lines: renderFileEntry(entry) };
    case 'response':
      return { title: `response_url ${entry.id}`, lines: renderResponseEntry(entry) };
    case 'home':
      return { title: `App Home of ${entry.user}`, lines: renderHomeEntry(entry) };
  }
}

/** The transcript of the entries, in order: each section titled, then its lines. */
export function renderTranscript(entries: Entry[]): string {
  const sections = new Map<string, string[]>();
  for (const entry of entries) {
    const { title, lines } = renderEntry(entry);
    const section = sections.get(title);
    if (section) section.push(...lines);
    else sections.set(title, lines);
  }
  const out: string[] = [];
  for (const [title, lines] of sections) out.push(`=== ${title} ===`, ...lines, '');
  return out.join('\n');
}
