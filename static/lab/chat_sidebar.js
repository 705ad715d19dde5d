// The chat page's conversation list: search, open, rename and delete.
// Items are #conversation-list li[data-id] with a .title (the browser tests rely on it).
// Each item is one tab stop (its open button): the arrow keys move between items, F2
// renames and Delete deletes; the rename and delete buttons are for the pointer.
// #conversation-filter picks the chats or the side-by-side runs; those are grouped by
// run under li.conversation-group (the prompt), each item named by its variant.

import { apiDelete, apiGet, apiPatch, results } from './api.js';
import { debounce, el, formatDate } from './util.js';

// The next (or previous) conversation in the list, past group headings.
function sibling(li, direction) {
  let node = li[direction];
  while (node && !node.dataset.id) node = node[direction];
  return node;
}

// A side-by-side conversation is titled "<variant> · <prompt>" (lab/conversations.py).
function splitTitle(title) {
  const at = (title || '').indexOf(' · ');
  if (at < 0) return { variant: title, prompt: title };
  return { variant: title.slice(0, at), prompt: title.slice(at + 3) };
}

export class ConversationList {
  // onOpen(id): open a conversation; onDeleted(id): it is gone; onRenamed(id, title).
  constructor({ onOpen, onDeleted, onRenamed, onError }) {
    this.list = document.getElementById('conversation-list');
    this.search = document.getElementById('conversation-search');
    this.empty = document.getElementById('conversation-empty');
    this.filter = document.getElementById('conversation-filter');
    this.onOpen = onOpen;
    this.onDeleted = onDeleted;
    this.onRenamed = onRenamed;
    this.onError = onError;
    this.activeId = null;
    this.loading = null;
    this.search.addEventListener('input', debounce(() => this.reload(), 250));
    this.filter.addEventListener('change', () => this.reload());
    this.list.addEventListener('click', (event) => this.clicked(event));
    this.list.addEventListener('keydown', (event) => this.key(event));
  }

  query() {
    return this.search.value.trim();
  }

  kind() {
    return this.filter.value === 'side_by_side' ? 'side_by_side' : 'chat';
  }

  async reload() {
    const query = this.query();
    // Only the answer to the latest query may be drawn (typing fires several requests).
    const token = {};
    this.loading = token;
    const params = new URLSearchParams({ kind: this.kind() });
    if (query) params.set('q', query);
    const url = `/api/conversations?${params}`;
    try {
      const items = results(await apiGet(url));
      if (this.loading === token) this.render(items);
    } catch (error) {
      if (this.loading === token) this.onError(`Could not list the conversations: ${error.message}`);
    }
  }

  render(items) {
    if (this.kind() === 'side_by_side') this.list.replaceChildren(...this.groups(items));
    else this.list.replaceChildren(...items.map((item) => this.item(item)));
    this.updateEmpty();
  }

  // A run's conversations under one heading, runs in the order of their newest one.
  groups(items) {
    const runs = new Map();
    for (const item of items) {
      const key = item.side_by_side_run || `conversation-${item.id}`;
      if (!runs.has(key)) runs.set(key, []);
      runs.get(key).push(item);
    }
    return [...runs.values()].flatMap((run) => {
      const prompt = splitTitle(run[0].title).prompt;
      const heading = el('li', { class: 'conversation-group', title: prompt }, el('span', {}, prompt));
      return [heading, ...run.map((item) => this.item(item, { grouped: true }))];
    });
  }

  updateEmpty() {
    const none = this.list.querySelector('li[data-id]') === null;
    this.empty.hidden = !none;
    const nothing = this.kind() === 'side_by_side' ? 'No side-by-side runs yet.' : 'No conversations yet.';
    this.empty.textContent = this.query() ? 'No conversation matches.' : nothing;
  }

  item(conversation, { grouped = false } = {}) {
    const id = String(conversation.id);
    const meta = [conversation.model, formatDate(conversation.updated_at)].filter(Boolean).join(' · ');
    // In a run's group the heading holds the prompt: the item says which variant it is.
    const label = grouped ? splitTitle(conversation.title).variant : conversation.title;
    const open = el(
      'button',
      { type: 'button', class: 'conversation-open', dataset: { action: 'open' }, title: conversation.title, 'aria-keyshortcuts': 'F2 Delete' },
      el('span', { class: 'title' }, label || 'Untitled'),
      el('span', { class: 'meta' }, meta),
    );
    const rename = el('button', { type: 'button', class: 'icon-button', tabindex: '-1', dataset: { action: 'rename' }, title: 'Rename (F2)', 'aria-label': 'Rename conversation' }, '✎');
    const remove = el('button', { type: 'button', class: 'icon-button', tabindex: '-1', dataset: { action: 'delete' }, title: 'Delete (Delete key)', 'aria-label': 'Delete conversation' }, '✕');
    const li = el('li', { class: grouped ? 'conversation-item grouped' : 'conversation-item', dataset: { id } }, open, el('div', { class: 'item-actions' }, rename, remove));
    if (conversation.message_count !== undefined) li.dataset.count = String(conversation.message_count);
    if (id === this.activeId) li.classList.add('active');
    return li;
  }

  find(id) {
    return this.list.querySelector(`li[data-id="${CSS.escape(String(id))}"]`);
  }

  // A conversation was created or changed over the websocket: move it to the top.
  upsert(conversation) {
    if (this.query() || this.kind() === 'side_by_side') {
      this.reload(); // whether it still matches, and in which group, is the server's call
      return;
    }
    if (conversation.side_by_side_run) return; // listed with the side-by-side runs
    const existing = this.find(conversation.id);
    const fresh = this.item({ message_count: existing?.dataset.count, ...conversation });
    if (existing) existing.remove();
    this.list.prepend(fresh);
    this.updateEmpty();
  }

  setActive(id) {
    this.activeId = id === null || id === undefined ? null : String(id);
    for (const li of this.list.children) li.classList.toggle('active', li.dataset.id === this.activeId);
  }

  clicked(event) {
    const li = event.target.closest('li[data-id]');
    if (!li) return;
    const action = event.target.closest('[data-action]')?.dataset.action || 'open';
    const id = Number(li.dataset.id);
    if (action === 'rename') this.rename(li, id);
    else if (action === 'delete') this.remove(li, id);
    else this.onOpen(id);
  }

  key(event) {
    const li = event.target.closest('li[data-id]');
    if (!li || !event.target.matches('.conversation-open')) return;
    const moves = { ArrowDown: sibling(li, 'nextElementSibling'), ArrowUp: sibling(li, 'previousElementSibling') };
    if (event.key in moves) {
      event.preventDefault();
      moves[event.key]?.querySelector('.conversation-open')?.focus();
    } else if (event.key === 'F2') {
      event.preventDefault();
      this.rename(li, Number(li.dataset.id));
    } else if (event.key === 'Delete') {
      event.preventDefault();
      this.remove(li, Number(li.dataset.id));
    }
  }

  async rename(li, id) {
    const current = li.querySelector('.conversation-open').title;
    const title = window.prompt('Rename the conversation:', current);
    if (title === null || !title.trim() || title === current) return;
    try {
      const saved = await apiPatch(`/api/conversations/${id}`, { title: title.trim() });
      li.querySelector('.title').textContent = li.classList.contains('grouped') ? splitTitle(saved.title).variant : saved.title;
      li.querySelector('.conversation-open').title = saved.title;
      this.onRenamed(id, saved.title);
    } catch (error) {
      this.onError(`Could not rename: ${error.message}`);
    }
  }

  async remove(li, id) {
    const title = li.querySelector('.conversation-open').title;
    if (!window.confirm(`Delete "${title}"? This cannot be undone.`)) return;
    try {
      await apiDelete(`/api/conversations/${id}`);
      const neighbour = sibling(li, 'nextElementSibling') || sibling(li, 'previousElementSibling');
      const hadFocus = li.contains(document.activeElement);
      const heading = li.previousElementSibling;
      li.remove();
      // A run's heading goes with its last conversation.
      if (heading?.matches('.conversation-group') && !heading.nextElementSibling?.dataset.id) heading.remove();
      if (hadFocus) neighbour?.querySelector('.conversation-open')?.focus();
      this.updateEmpty();
      this.onDeleted(id);
    } catch (error) {
      this.onError(`Could not delete: ${error.message}`);
    }
  }
}
