// The side-by-side page: one prompt sent to 2-4 variants at once, each over a chat
// websocket of its own (the chat page's protocol: every column is a conversation), its
// reply streamed in its column with its time to first token and tokens/s; then a vote
// for the better reply, kept with the conversations (POST /api/side-by-side/votes).

import { apiGet, apiPost, chats, results } from './api.js';
import { ChatSocket } from './chat_socket.js';
import { el, readJsonScript, showBanner, wireBannerClose } from './util.js';

const $ = (id) => document.getElementById(id);
const MIN_COLUMNS = 2;
const MAX_COLUMNS = 4;
const error = $('sbs-error');
const showError = (message) => showBanner(error, message);
let choices = []; // {value, label, model, adapter}
let columns = [];

async function loadChoices() {
  const [models, adapters] = await Promise.all([apiGet('/api/models'), apiGet('/api/adapters')]);
  choices = results(models)
    .filter(chats)
    .map((m) => ({ value: m.name, label: m.name, model: m.name, adapter: null }));
  for (const adapter of results(adapters)) {
    const label = `${adapter.base_model} + ${adapter.name}`;
    choices.push({ value: label, label, model: adapter.base_model, adapter: adapter.name });
  }
}

function addPicker(chosen) {
  const pickers = $('sbs-variants');
  const index = pickers.children.length;
  if (index >= MAX_COLUMNS) return;
  const select = el('select', { class: 'sbs-variant', 'aria-label': `Variant ${index + 1}` },
    choices.map((choice) => el('option', { value: choice.value }, choice.label)));
  select.value = chosen || choices[Math.min(index, choices.length - 1)]?.value || '';
  pickers.append(select);
  $('sbs-add').disabled = pickers.children.length >= MAX_COLUMNS;
}

class Column {
  constructor(choice, index) {
    this.choice = choice;
    this.conversation = null;
    this.done = false;
    this.text = el('div', { class: 'sbs-reply', 'aria-live': 'polite' });
    this.stats = el('p', { class: 'sbs-stats muted small' });
    this.vote = el('button', { type: 'button', class: 'sbs-vote', hidden: true }, 'This one is better');
    this.vote.addEventListener('click', () => vote(index));
    this.node = el('section', { class: 'card sbs-column', dataset: { variant: choice.label } },
      el('h2', {}, choice.label), this.text, this.stats, this.vote);
    this.socket = new ChatSocket({ onMessage: (data) => this.receive(data), onStatus: () => {} });
  }

  send(prompt, maxTokens) {
    this.socket.connect();
    const params = maxTokens ? { max_tokens: maxTokens } : {};
    this.socket.send({ type: 'send', content: prompt, model: this.choice.model, adapter: this.choice.adapter || 'none', params });
  }

  receive(data) {
    if (data.type === 'conversation') this.conversation = data.conversation.id;
    else if (data.type === 'delta') {
      this.text.append(data.text);
      this.showStats(data.stats);
    } else if (data.type === 'done') {
      this.text.textContent = data.message.content;
      this.showStats(data.message.stats);
      this.finish();
    } else if (data.type === 'error') {
      showError(`${this.choice.label}: ${data.message}`);
      this.finish();
    }
  }

  showStats(stats) {
    const parts = [];
    if (stats?.ttft_ms != null) parts.push(`first token ${stats.ttft_ms} ms`);
    if (stats?.tokens_per_second != null) parts.push(`${stats.tokens_per_second} tokens/s`);
    this.stats.textContent = parts.join(' · ');
  }

  finish() {
    this.done = true;
    this.socket.end();
    if (columns.every((column) => column.done && column.conversation)) {
      for (const column of columns) column.vote.hidden = false;
    }
  }
}

async function vote(winner) {
  const status = $('sbs-vote-status');
  try {
    await apiPost('/api/side-by-side/votes', { conversations: columns.map((c) => c.conversation), winner });
    for (const column of columns) column.vote.hidden = true;
    columns[winner].node.classList.add('sbs-winner');
    status.textContent = `Vote saved: ${columns[winner].choice.label} was better.`;
    status.hidden = false;
  } catch (failure) {
    showError(`Could not save the vote: ${failure.message}`);
  }
}

function send(event) {
  event.preventDefault();
  const prompt = $('sbs-prompt').value.trim();
  const picked = [...document.querySelectorAll('.sbs-variant')].map((s) => choices.find((c) => c.value === s.value));
  if (!prompt) return showError('Type a prompt first.');
  if (picked.length < MIN_COLUMNS || picked.some((c) => !c)) return showError('Choose at least two variants.');
  const maxTokens = Number($('sbs-max-tokens').value) || null;
  for (const column of columns) column.socket.end(); // an earlier round still streaming
  columns = picked.map((choice, index) => new Column(choice, index));
  $('sbs-columns').replaceChildren(...columns.map((column) => column.node));
  $('sbs-columns').dataset.count = String(columns.length);
  $('sbs-vote-status').hidden = true;
  for (const column of columns) column.send(prompt, maxTokens);
}

wireBannerClose(error);
$('sbs-form').addEventListener('submit', send);
$('sbs-add').addEventListener('click', () => addPicker());
loadChoices()
  .then(() => {
    const first = readJsonScript('default-model', '');
    addPicker(first);
    addPicker(choices.find((choice) => choice.value !== first)?.value);
    $('sbs-send').disabled = false;
  })
  .catch((failure) => showError(`Could not list the models: ${failure.message}`));
