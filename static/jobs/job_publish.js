// Publishing on the job page (staff), two cards fed each state of the job:
// - on a succeeded quantize, finetune or dataset job, #publish-card: a form that asks
//   POST /api/<kind>/push for a publish job, and this job's earlier publishes;
// - on a publish job, #publish-upload: how far the upload is, where it goes, and the
//   Hub's page once it is there.

import { apiGet, apiPost, results } from '../lab/api.js';
import { el, formatDate } from '../lab/util.js';
import { isFinished, jobUrl, shortId, statusBadge } from './job_format.js';

const $ = (id) => document.getElementById(id);
const SOURCE_KINDS = new Set(['quantize', 'finetune', 'dataset']);
const HISTORY_POLL_MS = 3000; // only while one of the listed publishes is unfinished
const NO_TOKEN = /no hugging face token/i;

const isNumber = (value) => typeof value === 'number' && Number.isFinite(value);
const objectOr = (value) => (value && typeof value === 'object' ? value : {});

// The server builds these URLs, but they end up in href: only web links get through.
const webUrl = (url) => (typeof url === 'string' && /^https?:\/\//i.test(url) ? url : '');

function hubLink(url, attrs = {}) {
  const href = webUrl(url);
  return href ? el('a', { ...attrs, href, target: '_blank', rel: 'noopener' }, href) : null;
}

const megabytes = (bytes) => (bytes / 1e6).toFixed(1);

// "3 of 5 files, 12.3 of 80.0 MB"; before the files are counted, what is going on.
export function uploadProgressText(job) {
  const metrics = objectOr(job.metrics);
  const { files, bytes } = metrics;
  if (isNumber(files) && isNumber(bytes)) {
    const doneFiles = isNumber(metrics.uploaded_files) ? metrics.uploaded_files : 0;
    const doneBytes = isNumber(metrics.uploaded_bytes) ? metrics.uploaded_bytes : 0;
    return `${doneFiles} of ${files} files, ${megabytes(doneBytes)} of ${megabytes(bytes)} MB`;
  }
  if (job.status === 'queued') return 'Waiting for a worker…';
  if (job.status === 'running') return 'Preparing the files…';
  return 'Nothing was uploaded.';
}

function definitions(pairs) {
  return pairs.flatMap(([term, value]) => [el('dt', {}, term), el('dd', {}, value)]);
}

// What was published: the source job when there is one, else the folder it named.
function sourceOf(params) {
  if (params.job_id) {
    return el('a', { href: jobUrl(params.job_id) }, `${params.kind || 'source'} job `, el('span', { class: 'mono' }, shortId(params.job_id)));
  }
  return el('span', { class: 'mono' }, params.source_path || params.folder || '—');
}

function historyRow(job) {
  const params = objectOr(job.params);
  const url = job.status === 'succeeded' ? hubLink(objectOr(job.result).url) : null;
  return el(
    'tr',
    { dataset: { id: String(job.id) } },
    el('td', { class: 'repo' }, el('span', { class: 'mono' }, params.repo_id || '—'), params.private ? el('span', { class: 'badge muted publish-private' }, 'private') : null),
    el('td', { class: 'status' }, statusBadge(job.status)),
    el('td', { class: 'created' }, formatDate(job.created_at)),
    el('td', { class: 'job' }, el('a', { href: jobUrl(job.id), 'aria-label': `Publish job ${shortId(job.id)}` }, shortId(job.id))),
    el('td', { class: 'url' }, url || el('span', { class: 'muted' }, '—')),
  );
}

function placeholderRow(text) {
  return el('tr', { class: 'placeholder-row' }, el('td', { colspan: 5, class: 'muted' }, text));
}

export class PublishPanel {
  constructor(jobId, { onError }) {
    this.jobId = jobId;
    this.onError = onError;
    this.job = null;
    this.historyStarted = false;
    this.historyTimer = null;
    this.historyRequest = 0;
    this.dom = {
      card: $('publish-card'),
      form: $('publish-form'),
      repo: $('publish-repo'),
      private: $('publish-private'),
      button: $('publish-button'),
      error: $('publish-error'),
      status: $('publish-status'),
      history: $('publish-history').tBodies[0],
      upload: $('publish-upload'),
      progress: $('publish-progress-text'),
      destination: $('publish-destination'),
      url: $('publish-url'),
    };
    this.dom.form.addEventListener('submit', (event) => this.submit(event));
  }

  // Called with each state of the job.
  update(job) {
    this.job = job;
    this.updateSource(job);
    this.updateUpload(job);
  }

  // ---- a job whose output can be published

  updateSource(job) {
    const publishable = SOURCE_KINDS.has(job.kind) && job.status === 'succeeded';
    this.dom.card.hidden = !publishable;
    if (!publishable || this.historyStarted) return;
    this.historyStarted = true; // a succeeded job never changes again: read the list once
    this.loadHistory();
  }

  async submit(event) {
    event.preventDefault();
    if (!this.job) return;
    const { button, repo } = this.dom;
    button.disabled = true;
    this.clearMessages();
    // wait: false: the answer comes at once with the publish job, whose page follows the upload.
    const body = { repo_id: repo.value.trim(), private: this.dom.private.checked, job_id: this.jobId, wait: false };
    try {
      const answer = await apiPost(`/api/${encodeURIComponent(this.job.kind)}/push`, body);
      this.showStarted(answer);
      this.loadHistory();
    } catch (error) {
      this.showError(error.message);
    } finally {
      button.disabled = false;
    }
  }

  clearMessages() {
    const { error, status } = this.dom;
    error.hidden = true;
    error.replaceChildren();
    status.hidden = true;
    status.replaceChildren();
  }

  showStarted(answer) {
    const job = objectOr(answer?.job);
    const follow = job.id ? el('a', { id: 'publish-job-link', href: jobUrl(job.id) }, 'Publishing… (follow the upload)') : 'Publishing…';
    const repo = hubLink(answer?.url, { id: 'publish-repo-link' });
    this.dom.status.replaceChildren(follow, repo ? ' to ' : '', repo || '');
    this.dom.status.hidden = false;
  }

  // The server's reason as it is; without a token, the way to add one.
  showError(message) {
    const settings = NO_TOKEN.test(message) ? [' ', el('a', { href: '/settings/' }, 'Add a token in Settings')] : [];
    this.dom.error.replaceChildren(message, ...settings);
    this.dom.error.hidden = false;
  }

  // The newest publishes of every job (the API's list is capped), this job's kept. A read
  // started later (after a new publish) wins, so only one poll timer is ever pending.
  async loadHistory() {
    clearTimeout(this.historyTimer);
    this.historyTimer = null;
    const request = ++this.historyRequest;
    let mine;
    try {
      const jobs = results(await apiGet('/api/jobs?kind=publish'));
      mine = jobs.filter((job) => String(objectOr(job.params).job_id ?? '') === this.jobId);
    } catch (error) {
      if (request !== this.historyRequest) return;
      this.dom.history.replaceChildren(placeholderRow('Could not list the earlier publishes.'));
      this.onError(`Could not list this job's publishes: ${error.message}`);
      return;
    }
    if (request !== this.historyRequest) return;
    this.dom.history.replaceChildren(...(mine.length ? mine.map(historyRow) : [placeholderRow('Not published yet.')]));
    if (mine.some((job) => !isFinished(job))) {
      this.historyTimer = setTimeout(() => this.loadHistory(), HISTORY_POLL_MS);
    }
  }

  // ---- a publish job

  updateUpload(job) {
    const publish = job.kind === 'publish';
    this.dom.upload.hidden = !publish;
    if (!publish) return;
    const params = objectOr(job.params);
    this.dom.progress.textContent = uploadProgressText(job);
    this.dom.destination.replaceChildren(
      ...definitions([
        ['Repo', el('span', { class: 'mono' }, params.repo_id || '—')],
        ['Repo type', params.repo_type || '—'],
        ['Visibility', params.private ? 'private' : 'public'],
        ['From', sourceOf(params)],
      ]),
    );
    this.renderUrl(job);
  }

  renderUrl(job) {
    const href = job.status === 'succeeded' ? webUrl(objectOr(job.result).url) : '';
    const { url } = this.dom;
    url.hidden = !href;
    if (!href) return;
    url.href = href;
    url.textContent = href;
  }
}
