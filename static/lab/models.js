// The models page: the registry table (load/unload, delete, updates from the Hub), the
// details dialog (its mounted adapters: model_adapters.js), the "Get a model" panel
// (hub_pull.js), GGUF import and the "Compare texts" panel (compare_texts.js).

import { apiDelete, apiGet, apiPatch, apiPost, results } from './api.js';
import { updateComparePanel } from './compare_texts.js';
import { HubSearch, PullList } from './hub_pull.js';
import { AdapterMounts } from './model_adapters.js';
import { watchWorkerEvents } from './worker_events.js';
import { debounce, el, formatBytes, hideBanner, labelCells, readJsonScript, showBanner, wireBannerClose } from './util.js';

const $ = (id) => document.getElementById(id);
const IMPORT_POLL_MS = 500;

const dom = {
  tbody: $('models-table').tBodies[0],
  error: $('models-error'),
  status: $('models-status'),
  dialog: $('model-details'),
  importForm: $('import-form'),
  importPath: $('import-path'),
  importName: $('import-name'),
  importButton: $('import-button'),
  importStatus: $('import-status'),
  importProgress: $('import-progress'),
  importMessage: $('import-message'),
  importError: $('import-error'),
  draftModel: $('draft-model'),
  draftError: $('draft-model-error'),
};
let modelNames = [];
let byName = new Map();
const isStaff = readJsonScript('user-is-staff', false) === true;
// name -> 'checking' | 'current' | {latest}: what "Check for update" found, kept across refreshes.
const updates = new Map();

const modelUrl = (name, action = '') => `/api/models/${encodeURIComponent(name)}${action ? `/${action}` : ''}`;

// ---- table

function actionButton(action, label, extra = '', attrs = {}) {
  return el('button', { ...attrs, type: 'button', class: `small-button ${extra}`.trim(), dataset: { action } }, label);
}

// Load for a model that is not loaded, Unload (or Drain: finish, then stop) for one that
// is; all are for staff.
function loadButtons(model) {
  const why = (applies, otherwise) => (!isStaff ? 'staff only' : applies ? null : otherwise);
  const load = why(!model.loaded, 'already loaded');
  const unload = why(model.loaded, 'not loaded');
  return [
    actionButton('load', 'Load', '', { disabled: Boolean(load), title: load }),
    actionButton('unload', 'Unload', '', { disabled: Boolean(unload), title: unload }),
    actionButton('drain', 'Drain', '', { disabled: Boolean(unload), title: unload || 'take no new requests, finish these, then stop' }),
  ];
}

function updateState(model) {
  const state = updates.get(model.name);
  if (state === 'checking') return el('span', { class: 'muted small' }, 'checking…');
  if (state === 'current') return el('span', {}, el('span', { class: 'muted' }, 'up to date'), ' ', actionButton('check-update', 'Check again', 'link-button'));
  if (state) {
    return el('span', { class: 'update-available' }, el('span', { class: 'badge' }, 'Update available'), ' ', actionButton('update', 'Update'));
  }
  return actionButton('check-update', 'Check for update', 'link-button');
}

// Pulled models name their repo under the name, with the way to ask for a newer commit.
function repoLine(model) {
  if (!model.repo_id) return null;
  return el('div', { class: 'repo-line small' }, el('span', { class: 'repo-id muted' }, model.repo_id), ' ', updateState(model));
}

function modelRow(model) {
  const loaded = el('td', { class: 'loaded' }, model.loaded ? 'loaded' : '—');
  if (model.loaded) loaded.classList.add('is-loaded');
  const name = el('td', { class: 'model-name' }, model.name);
  if (model.default) name.append(' ', el('span', { class: 'badge' }, 'default'));
  // What it serves besides chat: embeddings or rerank (its own routes, never a chat), or
  // the media a chat with it may hold (vision, audio).
  for (const capability of model.capabilities || []) {
    if (capability !== 'chat') name.append(' ', el('span', { class: 'badge capability' }, capability));
  }
  const repo = repoLine(model);
  if (repo) name.append(repo);
  // A folder of links to files elsewhere (a registered checkout) uses no disk of its own.
  const disk = Number.isFinite(model.disk_bytes) && model.disk_bytes > 0 ? formatBytes(model.disk_bytes) : '—';
  return el(
    'tr',
    { dataset: { name: model.name } },
    name,
    el('td', {}, model.architecture || '—'),
    el('td', {}, model.quantization || '—'),
    el('td', { class: 'num' }, formatBytes(model.size_bytes)),
    el('td', { class: 'num disk' }, disk),
    // Plain digits ("8192", not "8,192"): it is the figure people compare with configs.
    el('td', { class: 'num' }, Number.isFinite(model.context_length) ? String(model.context_length) : '—'),
    loaded,
    el(
      'td',
      { class: 'row-actions' },
      loadButtons(model),
      actionButton('details', 'Details'),
      // The default model is never deleted (the server refuses): no button that always fails.
      isStaff && !model.default ? actionButton('delete', 'Delete', 'danger') : null,
    ),
  );
}

function placeholderRow(text) {
  return el('tr', { class: 'placeholder-row' }, el('td', { colspan: 8, class: 'muted' }, text));
}

async function refreshTable() {
  try {
    const models = results(await apiGet('/api/models'));
    modelNames = models.map((model) => model.name);
    byName = new Map(models.map((model) => [model.name, model]));
    updateComparePanel(models);
    dom.tbody.replaceChildren(...(models.length ? models.map(modelRow) : [placeholderRow('No models registered yet.')]));
    labelCells($('models-table'));
  } catch (error) {
    showBanner(dom.error, `Could not list the models: ${error.message}`);
    if (!dom.tbody.querySelector('tr[data-name]')) dom.tbody.replaceChildren(placeholderRow('Could not load the models.'));
  }
}

// Loading a model takes seconds: every button of the row waits, the clicked one says why.
async function loadOrUnload(row, button, action) {
  const buttons = [...row.querySelectorAll('button')];
  const label = button.textContent;
  const enabled = buttons.filter((other) => !other.disabled);
  for (const other of buttons) other.disabled = true;
  button.replaceChildren(el('span', { class: 'spinner', 'aria-hidden': 'true' }), action === 'load' ? ' Loading…' : ' Unloading…');
  row.setAttribute('aria-busy', 'true');
  try {
    await apiPost(modelUrl(row.dataset.name, action));
    hideBanner(dom.error);
  } catch (error) {
    showBanner(dom.error, `Could not ${action} ${row.dataset.name}: ${error.message}`);
  }
  await refreshTable();
  // Still there only if the refresh failed: give the row its buttons back.
  if (row.isConnected) {
    for (const other of enabled) other.disabled = false;
    button.textContent = label;
    row.removeAttribute('aria-busy');
  }
}

// A drain answers at once: the workers finish their requests, then stop (the events
// panel and the next refresh show it).
async function drainModel(row, button) {
  const name = row.dataset.name;
  button.disabled = true;
  try {
    await apiPost(modelUrl(name, 'drain'));
    hideBanner(dom.error);
    dom.status.textContent = `Draining ${name}: it takes no new requests, finishes the ones it has, then stops.`;
  } catch (error) {
    showBanner(dom.error, `Could not drain ${name}: ${error.message}`);
  }
  await refreshTable();
}

// ---- details dialog

function formatDefaults(defaults) {
  if (!defaults || typeof defaults !== 'object') return '—';
  return Object.entries(defaults)
    .map(([key, value]) => `${key} ${value}`)
    .join(' · ');
}

async function showDetails(name) {
  let info;
  try {
    info = await apiGet(modelUrl(name));
  } catch (error) {
    showBanner(dom.error, `Could not read ${name}: ${error.message}`);
    return;
  }
  const dialog = dom.dialog;
  dialog.querySelector('.name').textContent = info.name;
  dialog.querySelector('.path').textContent = info.path || '—';
  dialog.querySelector('.thinking').textContent = info.supports_thinking ? 'yes (enable_thinking)' : 'no';
  dialog.querySelector('.defaults').textContent = formatDefaults(info.defaults);
  dialog.querySelector('.config').textContent = JSON.stringify(info.config ?? {}, null, 2);
  dialog.querySelector('.chat-template').textContent = info.chat_template || '(no chat template)';
  showDraftChoice(info);
  if (!dialog.open) dialog.showModal();
  await adapterMounts.show(info);
}

// A model's default draft model: any other registered model; the server refuses one with
// another vocabulary, and the select goes back to what is saved.
function showDraftChoice(info) {
  const select = dom.draftModel;
  const options = [el('option', { value: '' }, '(none)')];
  for (const name of modelNames) if (name !== info.name) options.push(el('option', { value: name }, name));
  select.replaceChildren(...options);
  select.value = info.draft_model || '';
  select.dataset.model = info.name;
  select.dataset.saved = select.value;
  dom.draftError.hidden = true;
}

async function saveDraftChoice() {
  const select = dom.draftModel;
  dom.draftError.hidden = true;
  try {
    const info = await apiPatch(modelUrl(select.dataset.model), { draft_model: select.value || null });
    select.dataset.saved = info.draft_model || '';
  } catch (error) {
    dom.draftError.textContent = error.message;
    dom.draftError.hidden = false;
    select.value = select.dataset.saved;
  }
}

// ---- delete and updates

async function deleteModel(row, button) {
  const name = row.dataset.name;
  const model = byName.get(name);
  const files = model?.files_managed ? ' Its files under the models folder go too.' : ' Its files are not under the models folder: they stay.';
  if (!window.confirm(`Delete ${name}?${files}`)) return;
  button.disabled = true;
  try {
    const done = await apiDelete(modelUrl(name));
    hideBanner(dom.error);
    updates.delete(name);
    dom.status.textContent = done.files_removed ? `Deleted ${name}: ${formatBytes(done.freed_bytes)} freed.` : `Deleted ${name} from the registry.`;
  } catch (error) {
    showBanner(dom.error, `Could not delete ${name}: ${error.message}`); // 409: loaded, pinned, in use
  }
  await refreshTable();
  if (button.isConnected) button.disabled = false;
}

function renderRepoLine(name) {
  const row = dom.tbody.querySelector(`tr[data-name="${CSS.escape(name)}"]`);
  const model = byName.get(name);
  row?.querySelector('.repo-line')?.replaceWith(repoLine(model));
}

async function checkUpdate(name) {
  updates.set(name, 'checking');
  renderRepoLine(name);
  try {
    const answer = await apiGet(modelUrl(name, 'update'));
    updates.set(name, answer.update_available ? { latest: answer.latest } : 'current');
  } catch (error) {
    updates.delete(name);
    showBanner(dom.error, `Could not check ${name} for an update: ${error.message}`);
  }
  renderRepoLine(name);
}

// The same repo and revision under the same name: the pull replaces the model's folder.
async function pullUpdate(name, button) {
  const model = byName.get(name);
  if (!model?.repo_id) return;
  button.disabled = true;
  const params = { repo_id: model.repo_id, name };
  if (model.revision) params.revision = model.revision;
  try {
    await pulls.start(params, `${name} (update from ${model.repo_id})`);
    updates.delete(name);
    renderRepoLine(name);
  } catch (error) {
    showBanner(dom.error, `Could not update ${name}: ${error.message}`);
    button.disabled = false;
  }
}

function tableClick(event) {
  const button = event.target.closest('button[data-action]');
  const row = button?.closest('tr[data-name]');
  if (!row) return;
  const action = button.dataset.action;
  const name = row.dataset.name;
  if (action === 'details') showDetails(name);
  else if (action === 'load' || action === 'unload') loadOrUnload(row, button, action);
  else if (action === 'drain') drainModel(row, button);
  else if (action === 'delete') deleteModel(row, button);
  else if (action === 'check-update') checkUpdate(name);
  else if (action === 'update') pullUpdate(name, button);
}

// ---- import

function showImportError(message) {
  dom.importError.textContent = message;
  dom.importError.hidden = !message;
}

function showImportProgress(job) {
  dom.importStatus.hidden = false;
  const progress = Number(job.progress);
  dom.importProgress.value = Number.isFinite(progress) ? Math.min(Math.max(progress, 0), 1) : 0;
  dom.importMessage.textContent = job.message || job.status || '';
}

function setImporting(on) {
  dom.importButton.disabled = on;
  dom.importButton.textContent = on ? 'Importing…' : 'Import';
}

const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Polls until the job ends; a failed poll (server restarting) is reported, not retried.
async function followImport(job) {
  let current = job;
  while (current.status === 'running') {
    showImportProgress(current);
    await delay(IMPORT_POLL_MS);
    current = await apiGet(`/api/models/imports/${encodeURIComponent(job.id)}`);
  }
  showImportProgress(current);
  return current;
}

async function startImport(event) {
  event.preventDefault();
  const path = dom.importPath.value.trim();
  if (!path) {
    showImportError('Enter the path of a .gguf file on the server.');
    dom.importPath.focus();
    return;
  }
  const body = { path };
  const name = dom.importName.value.trim();
  if (name) body.name = name;
  showImportError('');
  setImporting(true);
  try {
    const job = await followImport(await apiPost('/api/models/import', body));
    if (job.status === 'succeeded') {
      dom.importProgress.value = 1; // done, whatever the last progress report said
      dom.importMessage.textContent = `Imported as ${job.model || job.name || 'a new model'}.`;
      dom.importForm.reset();
      await refreshTable();
    } else {
      showImportError(job.error || 'The import failed.');
    }
  } catch (error) {
    showImportError(error.message);
  } finally {
    setImporting(false);
  }
}

// ---- start

const pulls = new PullList($('pull-list'), { onSucceeded: refreshTable });
const adapterMounts = new AdapterMounts(
  { list: $('mounted-adapters'), select: $('mount-adapter'), button: $('mount-button'), note: $('adapters-note'), error: $('adapters-error') },
  { isStaff },
);
new HubSearch(
  {
    form: $('hub-search-form'),
    input: $('hub-search'),
    mlxOnly: $('hub-mlx-only'),
    sort: $('hub-sort'),
    status: $('hub-status'),
    error: $('hub-error'),
    results: $('hub-results'),
  },
  pulls,
);
wireBannerClose(dom.error);
$('models-table').addEventListener('click', tableClick);
$('refresh-models').addEventListener('click', refreshTable);
dom.importForm.addEventListener('submit', startImport);
dom.draftModel.addEventListener('change', saveDraftChoice);
// A click on the backdrop (outside the dialog's box) closes it, as users expect.
dom.dialog.addEventListener('click', (event) => {
  if (event.target === dom.dialog) dom.dialog.close();
});
refreshTable();
// The panel refreshes the table as workers come and go (staff only: the panel is theirs).
if ($('worker-events')) watchWorkerEvents($('worker-events'), debounce(refreshTable, 300));
