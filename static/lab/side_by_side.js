// The side-by-side page: one prompt sent to 2-4 variants at once, each in a column of
// its own (sbs_column.js), with the chat's sampling fields shared by all of them; Stop
// ends every reply; then a vote for the better reply, or a tie, kept with the
// conversations (POST /api/side-by-side/votes).

import { apiGet, apiPost, chats, results } from './api.js';
import { PresetPicker, SamplingFields } from './sampling_fields.js';
import { Column } from './sbs_column.js';
import { el, readJsonScript, showBanner, wireBannerClose } from './util.js';

const $ = (id) => document.getElementById(id);
const MIN_COLUMNS = 2;
const MAX_COLUMNS = 4;
const error = $('sbs-error');
const showError = (message) => showBanner(error, message);
const fields = new SamplingFields();
const presets = new PresetPicker({
  systemPrompt: fields.systemPrompt,
  read: () => fields.read(),
  apply: (preset) => fields.set(preset.params || {}, { dirty: true }),
  onError: showError,
});
let choices = []; // {value, label, model, adapter}
let columns = [];
let voted = false; // this round's vote is saved

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

// ---- the variants: a select each, with a button that removes it (down to two)

function pickerRows() {
  return [...$('sbs-variants').children];
}

function renumber() {
  const rows = pickerRows();
  rows.forEach((row, index) => {
    row.querySelector('.sbs-variant').setAttribute('aria-label', `Variant ${index + 1}`);
    const remove = row.querySelector('.sbs-remove');
    remove.setAttribute('aria-label', `Remove variant ${index + 1}`);
    remove.disabled = rows.length <= MIN_COLUMNS;
  });
  $('sbs-add').disabled = rows.length >= MAX_COLUMNS;
}

function addPicker(chosen) {
  const index = pickerRows().length;
  if (index >= MAX_COLUMNS) return;
  const select = el('select', { class: 'sbs-variant' },
    choices.map((choice) => el('option', { value: choice.value }, choice.label)));
  select.value = chosen || choices[Math.min(index, choices.length - 1)]?.value || '';
  const remove = el('button', { type: 'button', class: 'ghost sbs-remove', title: 'Remove this variant' }, '✕');
  const row = el('div', { class: 'sbs-variant-row' }, select, remove);
  remove.addEventListener('click', () => {
    if (pickerRows().length <= MIN_COLUMNS) return;
    row.remove();
    renumber();
  });
  $('sbs-variants').append(row);
  renumber();
}

// ---- a round: the columns, Stop, the votes

// A key for the run's conversations; getRandomValues works over plain http too, where
// crypto.randomUUID does not exist.
function runKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `sbs-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

function running() {
  return columns.some((column) => !column.done);
}

function roundChanged() {
  $('sbs-stop').hidden = !running();
  $('sbs-send').disabled = running();
  const votable = columns.length >= MIN_COLUMNS && columns.every((c) => c.done && c.conversation);
  for (const column of columns) column.vote.hidden = !votable || voted;
  $('sbs-vote-bar').hidden = !votable || voted;
}

function stopAll() {
  for (const column of columns) column.stop();
}

async function vote(winner) {
  const status = $('sbs-vote-status');
  try {
    await apiPost('/api/side-by-side/votes', { conversations: columns.map((c) => c.conversation), winner });
  } catch (failure) {
    showError(`Could not save the vote: ${failure.message}`);
    return;
  }
  voted = true;
  roundChanged();
  if (winner === null) {
    status.textContent = 'Vote saved: a tie.';
  } else {
    columns[winner].node.classList.add('sbs-winner');
    status.textContent = `Vote saved: ${columns[winner].choice.label} was better.`;
  }
  status.hidden = false;
}

function send(event) {
  event.preventDefault();
  const prompt = $('sbs-prompt').value.trim();
  const picked = [...document.querySelectorAll('.sbs-variant')].map((s) => choices.find((c) => c.value === s.value));
  if (!prompt) return showError('Type a prompt first.');
  if (picked.length < MIN_COLUMNS || picked.some((c) => !c)) return showError('Choose at least two variants.');
  for (const column of columns) column.end(); // an earlier round still streaming
  const settings = { system_prompt: fields.systemPrompt.value, params: fields.read() };
  const run = runKey();
  columns = picked.map((choice, index) => new Column(choice, {
    onVote: () => vote(index),
    onFinish: roundChanged,
    onError: showError,
  }));
  $('sbs-columns').replaceChildren(...columns.map((column) => column.node));
  $('sbs-columns').dataset.count = String(columns.length);
  $('sbs-vote-status').hidden = true;
  voted = false;
  roundChanged();
  for (const column of columns) column.send(prompt, settings, run);
}

function start() {
  wireBannerClose(error);
  $('sbs-form').addEventListener('submit', send);
  $('sbs-add').addEventListener('click', () => addPicker());
  $('sbs-stop').addEventListener('click', stopAll);
  $('sbs-tie').addEventListener('click', () => vote(null));
  // Esc stops the replies, as on the chat page.
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && running()) stopAll();
  });
  // Every variant samples alike: max tokens starts where the chat's does, the rest at
  // each model's own defaults (the empty fields).
  const maxTokens = readJsonScript('chat-max-tokens', null);
  const sampled = ['temperature', 'top_p', 'top_k', 'min_p', 'repetition_penalty'];
  const eachModels = Object.fromEntries(sampled.map((key) => [key, "model's default"]));
  fields.applyDefaults(eachModels, { max_tokens: maxTokens }, true);
  if (window.matchMedia('(max-width: 760px)').matches) $('sbs-sampling').open = false;
  presets.load();
  loadChoices()
    .then(() => {
      const first = readJsonScript('default-model', '');
      addPicker(first);
      addPicker(choices.find((choice) => choice.value !== first)?.value);
      $('sbs-send').disabled = false;
    })
    .catch((failure) => showError(`Could not list the models: ${failure.message}`));
}

start();
