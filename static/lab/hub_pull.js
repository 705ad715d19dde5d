// The models page's "Get a model" panel: search the Hub (/api/hub/models), start pull jobs
// and follow each one live, as the job page does (/ws/jobs/<id>/, a REST poll while the
// socket is down).

import { isFinished, clampProgress, formatEta, socketUrl, statusBadge, setStatusBadge } from '../jobs/job_format.js';
import { JobFeed } from '../jobs/job_live.js';
import { apiGet, apiPost } from './api.js';
import { el, formatBytes } from './util.js';

const POLL_MS = 500; // only while the socket is down: a download moves quickly
const GROUP_SIZE = 64; // mlx-lm's default; the panel offers bits only
const QUANTIZABLE = new Set(['mlx', 'transformers']);

// The chat page picks its model from ?model= (chat.js, as the jobs' "use" links do).
export const chatUrl = (model) => `/?${new URLSearchParams({ model })}`;

export function startPull(params) {
  return apiPost('/api/jobs', { kind: 'pull', params });
}

// ---- one pull, followed live

class PullItem {
  constructor(job, label, onSucceeded) {
    this.id = String(job.id);
    this.job = null;
    this.onSucceeded = onSucceeded;
    this.cancelClicked = false;
    this.badge = statusBadge(job.status);
    this.progress = el('progress', { max: 1, value: 0, 'aria-label': `Pull of ${label}` });
    this.message = el('span', { class: 'pull-message', 'aria-live': 'polite' });
    this.eta = el('span', { class: 'pull-eta muted small' });
    this.error = el('p', { class: 'field-error', role: 'alert', hidden: true });
    this.cancel = el('button', { type: 'button', class: 'small-button' }, 'Cancel');
    this.chat = el('a', { class: 'button-link primary', hidden: true }, 'Chat with it');
    this.node = el(
      'li',
      { class: 'pull-item', dataset: { job: this.id } },
      el('div', { class: 'pull-head' }, el('span', { class: 'pull-label' }, label), this.badge),
      this.progress,
      el('p', { class: 'pull-text' }, this.message, ' ', this.eta),
      this.error,
      el('div', { class: 'pull-actions' }, this.chat, this.cancel, el('a', { href: `/jobs/${encodeURIComponent(this.id)}/`, class: 'small' }, 'Job page')),
    );
    this.cancel.addEventListener('click', () => this.cancelJob());
    this.feed = new JobFeed({
      url: socketUrl(`/ws/jobs/${encodeURIComponent(this.id)}/`),
      poll: async () => [await apiGet(`/api/jobs/${encodeURIComponent(this.id)}`)],
      pollMs: POLL_MS,
      onJobs: (jobs) => this.render(jobs[0]),
      onJob: (update) => this.render(update),
      onStatus: (status, detail) => {
        if (status === 'refused') this.showError(detail);
      },
      onError: (error) => this.showError(`Could not read the job: ${error.message}`),
      shouldPoll: () => !isFinished(this.job),
    });
    this.render(job);
    this.feed.start();
  }

  showError(text) {
    this.error.textContent = text || '';
    this.error.hidden = !text;
  }

  render(job) {
    if (!job || String(job.id) !== this.id) return;
    if (isFinished(this.job) && !isFinished(job)) return; // a late, older state
    const justFinished = !isFinished(this.job);
    this.job = job;
    setStatusBadge(this.badge, job.status);
    this.progress.value = job.status === 'succeeded' ? 1 : clampProgress(job.progress);
    this.eta.textContent = job.status === 'running' ? formatEta(job.eta_seconds) : '';
    const active = job.status === 'queued' || job.status === 'running';
    this.cancel.hidden = !active;
    this.cancel.disabled = this.cancelClicked || Boolean(job.cancel_requested);
    this.cancel.textContent = this.cancel.disabled ? 'Cancelling…' : 'Cancel';
    if (active) {
      this.message.textContent = job.message || (job.status === 'queued' ? 'waiting for a worker…' : '');
      this.showError('');
      return;
    }
    this.feed.stop(); // its last update has come
    if (job.status === 'succeeded') this.succeeded(job, justFinished);
    else if (job.status === 'cancelled') this.message.textContent = 'cancelled';
    else {
      this.message.textContent = '';
      this.showError(job.error || 'The pull failed.');
    }
  }

  succeeded(job, justFinished) {
    const model = typeof job.result?.model === 'string' ? job.result.model : job.params?.name;
    this.message.textContent = model ? `Ready as ${model}.` : 'Done.';
    if (model) {
      this.chat.href = chatUrl(model);
      this.chat.hidden = false;
    }
    if (justFinished) this.onSucceeded(model); // once, however many updates repeat the end
  }

  async cancelJob() {
    this.cancelClicked = true;
    this.cancel.disabled = true;
    this.cancel.textContent = 'Cancelling…';
    try {
      this.render(await apiPost(`/api/jobs/${encodeURIComponent(this.id)}/cancel`));
    } catch (error) {
      this.showError(`Could not cancel: ${error.message}`); // 409: it had already finished
      this.feed.refresh();
    }
  }
}

// The panel's list of pulls: each new one on top, kept across searches.
export class PullList {
  constructor(list, { onSucceeded = () => {} } = {}) {
    this.list = list;
    this.onSucceeded = onSucceeded;
  }

  // Starts the job; the server's refusal (400, 403) is thrown for the caller to show.
  async start(params, label = params.repo_id) {
    const job = await startPull(params);
    const item = new PullItem(job, label, this.onSucceeded);
    this.list.prepend(item.node);
    item.node.scrollIntoView({ block: 'nearest' });
    return job;
  }
}

// ---- search results

const count = (value) => (Number.isFinite(value) ? value.toLocaleString() : '—');

function day(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleDateString();
}

function labelled(id, text, control) {
  return el('div', { class: 'field' }, el('label', { for: id }, text), control);
}

function servableLine(result) {
  const badge = result.servable ? el('span', { class: 'badge ok' }, 'servable') : el('span', { class: 'badge not-servable' }, 'not servable');
  return el('p', { class: 'hub-servable small' }, badge, ' ', el('span', { class: 'hub-reason' }, result.reason || ''));
}

function resultItem(result, index, pulls) {
  const id = `hub-result-${index}`;
  const error = el('p', { class: 'field-error', role: 'alert', hidden: true });
  const controls = [];
  let quantize = null;
  let gguf = null;
  if (result.servable && QUANTIZABLE.has(result.format)) {
    quantize = el('select', { id: `${id}-quantize` }, el('option', { value: '' }, 'none'), el('option', { value: '4' }, '4-bit'), el('option', { value: '8' }, '8-bit'));
    controls.push(labelled(quantize.id, 'Quantize', quantize));
  }
  const importable = (result.gguf_files || []).filter((file) => file.importable);
  if (result.servable && result.format === 'gguf' && importable.length) {
    const options = importable.map((file) => el('option', { value: file.file }, `${file.file} (${[file.quantization, formatBytes(file.size_bytes)].filter(Boolean).join(', ')})`));
    gguf = el('select', { id: `${id}-gguf` }, ...options);
    controls.push(labelled(gguf.id, 'GGUF file', gguf));
  }
  const pull = el('button', { type: 'button', class: 'primary', disabled: !result.servable, 'aria-describedby': `${id}-name` }, 'Pull');
  pull.addEventListener('click', async () => {
    const params = { repo_id: result.id };
    if (quantize?.value) params.quantize = { bits: Number(quantize.value), group_size: GROUP_SIZE };
    if (gguf) params.gguf_file = gguf.value;
    error.hidden = true;
    pull.disabled = true;
    try {
      await pulls.start(params);
    } catch (failure) {
      error.textContent = failure.message; // 400 (a bad name, no worker) or 403 (not staff)
      error.hidden = false;
    } finally {
      pull.disabled = false;
    }
  });
  const badges = [result.format ? el('span', { class: 'badge muted' }, result.format) : null, result.gated ? el('span', { class: 'badge gated' }, 'gated') : null];
  const meta = [
    `size ${formatBytes(result.size_bytes)}`,
    `${count(result.downloads)} downloads`,
    `${count(result.likes)} likes`,
    result.last_modified ? `updated ${day(result.last_modified)}` : null,
  ];
  return el(
    'li',
    { class: 'hub-result', dataset: { repo: result.id, servable: String(Boolean(result.servable)) } },
    el('div', { class: 'hub-result-head' }, el('span', { class: 'hub-repo mono', id: `${id}-name` }, result.id), ...badges),
    el('p', { class: 'hub-meta small muted' }, meta.filter(Boolean).join(' · ')),
    servableLine(result),
    el('div', { class: 'hub-actions' }, ...controls, pull),
    error,
  );
}

export class HubSearch {
  // dom: {form, input, mlxOnly, sort, button, status, error, results}
  constructor(dom, pulls) {
    this.dom = dom;
    this.pulls = pulls;
    this.request = null;
    dom.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.search();
    });
  }

  say(text, error = '') {
    this.dom.status.textContent = text;
    this.dom.error.textContent = error;
    this.dom.error.hidden = !error;
  }

  async search() {
    const { input, mlxOnly, sort, results } = this.dom;
    const query = new URLSearchParams({ search: input.value.trim(), library: mlxOnly.checked ? 'mlx' : '', sort: sort.value, limit: '20' });
    this.request?.abort(); // a newer search wins over one still under way
    const request = new AbortController();
    this.request = request;
    this.say('Searching the Hub…');
    results.setAttribute('aria-busy', 'true');
    let found;
    try {
      found = await apiGet(`/api/hub/models?${query}`, { signal: request.signal });
    } catch (error) {
      if (error.name === 'AbortError') return;
      this.say('', error.message); // 502: the Hub could not be asked, in the server's words
      results.replaceChildren();
      return;
    } finally {
      if (this.request === request) results.removeAttribute('aria-busy');
    }
    if (found.offline) {
      this.say('', found.detail || 'The lab is offline: the Hub cannot be searched.');
      results.replaceChildren();
      return;
    }
    const list = Array.isArray(found.results) ? found.results : [];
    this.say(list.length ? `${list.length} model${list.length === 1 ? '' : 's'} found.` : 'No models match.');
    results.replaceChildren(...list.map((result, index) => resultItem(result, index, this.pulls)));
  }
}
