// Message elements of the chat page: saved messages, the streaming reply, their stats.
// Element shape (the browser tests rely on it):
//   article.message[data-role][data-id][data-versions] > .message-header (with .versions),
//   .message-attachments (a user message's images and audio), .content, details.reasoning,
//   .stats, buttons[data-action]

import { attachmentStrip } from './chat_attachments.js';
import { versionSwitcher } from './chat_versions.js';
import { renderMarkdown } from './markdown.js';
import { el } from './util.js';

// The raw text of each message element, for copy and edit (the DOM holds rendered HTML).
const rawText = new WeakMap();

export function messageText(node) {
  return rawText.get(node) ?? '';
}

function actionButton(action, label, title) {
  return el('button', { type: 'button', class: 'msg-action', dataset: { action }, title, 'aria-label': title }, label);
}

function messageActions(role) {
  const buttons = [actionButton('copy', 'Copy', 'Copy the message')];
  if (role === 'user') buttons.push(actionButton('edit', 'Edit', 'Edit and send again'));
  buttons.push(
    actionButton('branch', 'Branch', 'New conversation up to this message'),
    actionButton('delete', 'Delete', 'Delete this message'),
  );
  return el('div', { class: 'message-actions' }, buttons);
}

function messageHeader(role, model, versions = null) {
  return el(
    'div',
    { class: 'message-header' },
    el('span', { class: 'message-role' }, role === 'user' ? 'You' : 'Assistant'),
    model ? el('span', { class: 'message-model' }, model) : null,
    versions,
  );
}

function reasoningBlock(text, open) {
  const body = el('div', { class: 'reasoning-text' });
  body.textContent = text;
  return el('details', { class: 'reasoning', open }, el('summary', {}, 'Thinking'), body);
}

function fillContent(contentEl, role, text) {
  if (role === 'user') {
    contentEl.textContent = text; // user text is shown as typed, never as HTML
  } else if (text) {
    renderMarkdown(contentEl, text);
  } else {
    contentEl.replaceChildren(el('span', { class: 'empty-note' }, '(empty reply)'));
  }
}

function statSpan(name, text) {
  return el('span', { class: 'stat', dataset: { stat: name } }, text);
}

const isNumber = (value) => typeof value === 'number' && Number.isFinite(value);

function tokensText(stats) {
  const count = stats.completion_tokens;
  let text = `${count} token${count === 1 ? '' : 's'}`;
  if (isNumber(stats.prompt_tokens)) text += ` (prompt ${stats.prompt_tokens})`;
  return text;
}

// Live stats carry ttft_ms, completion_tokens, tokens_per_second; saved ones add the
// prompt and cached counts, finish_reason, model and duration_ms.
export function renderStats(statsEl, stats) {
  if (!stats || typeof stats !== 'object') {
    statsEl.replaceChildren();
    return;
  }
  const parts = [];
  if (isNumber(stats.ttft_ms)) parts.push(statSpan('ttft', `TTFT ${Math.round(stats.ttft_ms)} ms`));
  if (isNumber(stats.tokens_per_second)) parts.push(statSpan('tps', `${stats.tokens_per_second.toFixed(1)} tok/s`));
  if (isNumber(stats.completion_tokens)) parts.push(statSpan('tokens', tokensText(stats)));
  if (isNumber(stats.cached_tokens) && stats.cached_tokens > 0) {
    parts.push(statSpan('cached', `${stats.cached_tokens} cached`));
  }
  const drafted = (stats.accepted_prediction_tokens || 0) + (stats.rejected_prediction_tokens || 0);
  if (isNumber(stats.accepted_prediction_tokens) && drafted > 0) {
    const rate = Math.round((100 * stats.accepted_prediction_tokens) / drafted);
    parts.push(statSpan('drafts', `drafts ${stats.accepted_prediction_tokens}/${drafted} kept (${rate}%)`));
  }
  if (isNumber(stats.fast_forwarded_tokens) && stats.fast_forwarded_tokens > 0) {
    parts.push(statSpan('forwarded', `${stats.fast_forwarded_tokens} fast-forwarded`));
  }
  if (stats.finish_reason && stats.finish_reason !== 'stop') {
    parts.push(statSpan('finish', `finish: ${stats.finish_reason}`));
  }
  statsEl.replaceChildren(...parts);
  const details = [stats.model, isNumber(stats.duration_ms) ? `${(stats.duration_ms / 1000).toFixed(1)} s` : null];
  statsEl.title = details.filter(Boolean).join(' · ');
}

// A saved message ({id, role, content, reasoning, stats, versions, attachments}) as an element.
export function createMessage(message) {
  const role = message.role === 'user' ? 'user' : 'assistant';
  const stats = message.stats && typeof message.stats === 'object' ? message.stats : null;
  const versions = Array.isArray(message.versions) ? message.versions.join(',') : '';
  const node = el('article', { class: `message message-${role}`, dataset: { role, id: String(message.id), versions } });
  node.append(messageHeader(role, role === 'assistant' ? stats?.model : null, versionSwitcher(message)));
  if (role === 'assistant' && message.reasoning) node.append(reasoningBlock(message.reasoning, false));
  if (role === 'user' && message.attachments?.length) node.append(attachmentStrip(message.attachments));
  const contentEl = el('div', { class: role === 'user' ? 'content plain' : 'content markdown' });
  fillContent(contentEl, role, message.content || '');
  node.append(contentEl);
  if (role === 'assistant') {
    const statsEl = el('div', { class: 'stats' });
    renderStats(statsEl, stats);
    node.append(statsEl);
  }
  node.append(messageActions(role));
  rawText.set(node, message.content || '');
  return node;
}

// Only the last message may be regenerated, and only when it is a reply.
export function updateRegenerateButton(container) {
  for (const button of container.querySelectorAll('[data-action=regenerate]')) button.remove();
  const saved = container.querySelectorAll('.message[data-id]');
  const last = saved[saved.length - 1];
  if (!last || last.dataset.role !== 'assistant' || last.nextElementSibling) return;
  const actions = last.querySelector('.message-actions');
  if (actions) actions.prepend(actionButton('regenerate', 'Regenerate', 'Generate this reply again'));
}

// Removes every message element after the one with this id (all of them when null/0).
export function removeMessagesAfter(container, messageId) {
  const anchor = messageId ? container.querySelector(`.message[data-id="${CSS.escape(String(messageId))}"]`) : null;
  if (messageId && !anchor) return;
  let node = anchor ? anchor.nextElementSibling : container.firstElementChild;
  while (node) {
    const next = node.nextElementSibling;
    // The reply being generated (and a message not yet saved) stay: they come after.
    if (node.classList.contains('message') && !node.matches('.streaming, .pending')) node.remove();
    node = next;
  }
}

export function startEdit(node, onSave) {
  const contentEl = node.querySelector('.content');
  if (!contentEl || node.classList.contains('editing')) return;
  node.classList.add('editing');
  const area = el('textarea', { class: 'edit-box', rows: 4, 'aria-label': 'Edit message' });
  area.value = messageText(node);
  const save = el('button', { type: 'button', class: 'primary', dataset: { action: 'save-edit' } }, 'Save & send');
  const cancel = el('button', { type: 'button', dataset: { action: 'cancel-edit' } }, 'Cancel');
  contentEl.replaceChildren(area, el('div', { class: 'edit-actions' }, save, cancel));
  save.addEventListener('click', () => onSave(area.value));
  cancel.addEventListener('click', () => cancelEdit(node));
  area.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') cancelEdit(node);
  });
  area.focus();
}

export function cancelEdit(node, text = messageText(node)) {
  const contentEl = node.querySelector('.content');
  node.classList.remove('editing');
  if (contentEl) fillContent(contentEl, node.dataset.role, text);
}

// The user's message as sent, shown at once; the server's user_message replaces it.
export function createPendingMessage(text, attachments = []) {
  const node = createMessage({ id: '', role: 'user', content: text, attachments });
  delete node.dataset.id;
  node.classList.add('pending');
  node.querySelector('.message-actions')?.remove(); // nothing to act on until it is saved
  return node;
}

// The reply being generated, shown from the send: until its first event it says what it
// waits for ("Loading <model>…" while the model loads), with the seconds since the send.
// Markdown is re-rendered at most once per animation frame: deltas arrive far faster than
// the page needs to repaint.
export class StreamingBubble {
  constructor(model, onRender = () => {}, { loading = false } = {}) {
    this.text = '';
    this.reasoning = '';
    this.stats = null;
    this.frame = 0;
    this.onRender = onRender;
    this.contentEl = el('div', { class: 'content markdown' });
    this.statsEl = el('div', { class: 'stats' });
    this.reasoningEl = null;
    this.waitingEl = el('p', { class: 'waiting-note', role: 'status' });
    this.node = el(
      'article',
      { class: 'message message-assistant streaming', dataset: { role: 'assistant' }, 'aria-busy': 'true' },
      messageHeader('assistant', model),
      this.waitingEl,
      this.contentEl,
      this.statsEl,
    );
    this.waitFor(model, loading);
  }

  waitFor(model, loading) {
    this.model = model;
    this.what = loading ? `Loading ${model}…` : `Waiting for ${model}…`;
    const sent = performance.now();
    this.tick = () => {
      const seconds = Math.floor((performance.now() - sent) / 1000);
      this.waitingEl.textContent = `${this.what} ${seconds} s`;
    };
    this.tick();
    this.waitTimer = setInterval(this.tick, 250);
  }

  // The server took the request (its model is loaded): what is left is the first token.
  loaded() {
    this.what = `Waiting for ${this.model}…`;
    if (this.waitingEl.isConnected) this.tick();
  }

  // The first event of the reply: the wait is over.
  begin() {
    clearInterval(this.waitTimer);
    this.waitingEl.remove();
  }

  addReasoning(text, stats) {
    if (!this.reasoningEl) {
      this.reasoningEl = reasoningBlock('', true);
      this.node.insertBefore(this.reasoningEl, this.contentEl);
    }
    this.reasoning += text;
    this.update(stats);
  }

  addText(text, stats) {
    this.text += text;
    this.update(stats);
  }

  update(stats) {
    this.begin();
    if (stats) this.stats = stats;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    if (this.reasoningEl) this.reasoningEl.querySelector('.reasoning-text').textContent = this.reasoning;
    renderMarkdown(this.contentEl, this.text);
    renderStats(this.statsEl, this.stats);
    this.onRender();
  }

  // The request failed mid-reply: keep what came, marked as incomplete.
  fail() {
    this.begin();
    if (this.frame) cancelAnimationFrame(this.frame);
    this.flush();
    this.node.classList.remove('streaming');
    this.node.classList.add('failed');
    this.node.removeAttribute('aria-busy');
    if (this.reasoningEl) this.reasoningEl.open = false;
  }

  isEmpty() {
    return !this.text && !this.reasoning;
  }

  cancelFrame() {
    this.begin();
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
  }
}

// The scrolling column of messages and its "start a conversation" note.
export class MessageColumn {
  constructor(container, emptyNote) {
    this.container = container;
    this.emptyNote = emptyNote;
  }

  nearBottom() {
    const box = this.container;
    return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  }

  scrollToBottom() {
    this.container.scrollTop = this.container.scrollHeight;
  }

  // Follows the conversation only if the user had not scrolled up to read something.
  followIfNear() {
    if (this.nearBottom()) this.scrollToBottom();
  }

  place(node, replacing = null) {
    const follow = this.nearBottom();
    if (replacing) replacing.replaceWith(node);
    else this.container.append(node);
    this.changed();
    if (follow) this.scrollToBottom();
  }

  changed() {
    updateRegenerateButton(this.container);
    this.emptyNote.hidden = this.container.querySelector('.message') !== null;
  }

  find(id) {
    return this.container.querySelector(`.message[data-id="${CSS.escape(String(id))}"]`);
  }

  // null: empty; 'loading': empty with a loading note; an array: those saved messages.
  show(messages) {
    this.container.classList.toggle('loading', messages === 'loading');
    this.container.replaceChildren(...(Array.isArray(messages) ? messages.map(createMessage) : []));
    this.changed();
    this.scrollToBottom();
  }

  // Hides `node` and every message after it while a regenerate or an edit is on its way:
  // the server's `truncated` removes them, a refusal shows them again (restore).
  supersedeFrom(node) {
    for (let item = node; item; item = item.nextElementSibling) {
      if (!item.classList.contains('message')) continue;
      item.hidden = true;
      item.classList.add('superseded');
    }
  }

  restore() {
    for (const item of this.container.querySelectorAll('.message.superseded')) {
      item.hidden = false;
      item.classList.remove('superseded');
    }
    this.changed();
  }

  removeAfter(messageId) {
    removeMessagesAfter(this.container, messageId);
    this.changed();
  }

  remove(node) {
    node.remove();
    this.changed();
  }
}
