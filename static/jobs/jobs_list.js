// The jobs list (/jobs/): the #jobs-table of every job, kept live by /ws/jobs/ (or a
// 5 s poll of /api/jobs while the socket is down), and the "New job" card.

import { apiGet, results } from '../lab/api.js';
import { el, formatDate, hideBanner, labelCells, showBanner, wireBannerClose } from '../lab/util.js';
import { NewJobCard } from './job_forms.js';
import { clampProgress, jobSummary, jobUrl, shortId, socketUrl, statusBadge } from './job_format.js';
import { JobFeed } from './job_live.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 5000;

const dom = {
  tbody: $('jobs-table').tBodies[0],
  error: $('jobs-error'),
  live: $('jobs-live'),
};

const card = new NewJobCard();
let pollFailed = false; // the banner shows a failed read, to be hidden once one works

// ---- rows: #jobs-table tr[data-id] with cells .status and progress.progress

function kindCell(job) {
  const summary = jobSummary(job);
  return el('td', { class: 'kind' }, el('span', { class: 'job-kind' }, job.kind || '—'), summary ? el('span', { class: 'job-summary muted small' }, summary) : null);
}

function progressCell(job) {
  const value = clampProgress(job.progress);
  const percent = `${Math.round(value * 100)}%`;
  return el(
    'td',
    { class: 'progress-cell' },
    el('progress', { class: 'progress', max: 1, value, 'aria-label': `Progress of job ${shortId(job.id)}`, title: percent }),
    el('span', { class: 'percent small muted' }, percent),
  );
}

function jobRow(job) {
  const id = String(job.id);
  const link = el('a', { href: jobUrl(id), class: 'job-link mono', title: id }, shortId(id));
  const row = el(
    'tr',
    { class: 'job-row', dataset: { id, created: job.created_at || '' } },
    kindCell(job),
    el('td', { class: 'job-id' }, link),
    el('td', { class: 'status' }, statusBadge(job.status)),
    progressCell(job),
    el('td', { class: 'message', title: job.error || job.message || '' }, job.error && job.status === 'failed' ? job.error : job.message || ''),
    el('td', { class: 'created' }, el('time', { datetime: job.created_at || '' }, formatDate(job.created_at))),
    el('td', { class: 'owner' }, job.owner || '—'),
  );
  if (job.cancel_requested && job.status === 'running') row.classList.add('cancelling');
  return row;
}

function findRow(id) {
  return dom.tbody.querySelector(`tr[data-id="${CSS.escape(String(id))}"]`);
}

function placeholderRow(text) {
  return el('tr', { class: 'placeholder-row' }, el('td', { colspan: 7, class: 'muted' }, text));
}

function renderAll(jobs) {
  dom.tbody.replaceChildren(...(jobs.length ? jobs.map(jobRow) : [placeholderRow('No jobs yet: start one below.')]));
  labelCells($('jobs-table'));
}

// Newest first: a job the table has not seen goes before the first older one.
function insertRow(row) {
  const created = Date.parse(row.dataset.created) || Infinity;
  const next = [...dom.tbody.querySelectorAll('tr[data-id]')].find((other) => (Date.parse(other.dataset.created) || 0) < created);
  if (next) next.before(row);
  else dom.tbody.append(row);
}

function upsert(job) {
  const fresh = jobRow(job);
  const existing = findRow(job.id);
  if (existing) existing.replaceWith(fresh);
  else {
    dom.tbody.querySelector('.placeholder-row')?.remove();
    insertRow(fresh);
  }
  labelCells($('jobs-table'));
  card.addDatasetJob(job); // a dataset that just finished can be fine-tuned on right away
}

// A click anywhere on a row opens its job; the id link is the keyboard's way in.
function rowClick(event) {
  if (event.target.closest('a, button, input, select')) return;
  if (window.getSelection()?.toString()) return; // selecting text is not a click
  const row = event.target.closest('tr[data-id]');
  if (row) location.assign(jobUrl(row.dataset.id));
}

// ---- live updates

function showLive(status, detail) {
  dom.live.dataset.status = status;
  if (status === 'live') dom.live.textContent = 'Live';
  else if (status === 'connecting') dom.live.textContent = 'Connecting…';
  else if (status === 'polling') dom.live.textContent = `Offline: refreshing every ${POLL_MS / 1000} s`;
  else {
    dom.live.textContent = 'Not updating';
    showBanner(dom.error, detail);
  }
}

const feed = new JobFeed({
  url: socketUrl('/ws/jobs/'),
  poll: async () => results(await apiGet('/api/jobs')),
  pollMs: POLL_MS,
  onJobs: (jobs) => {
    if (pollFailed) hideBanner(dom.error);
    pollFailed = false;
    renderAll(jobs);
  },
  onJob: upsert,
  onStatus: showLive,
  onError: (error) => {
    pollFailed = true;
    showBanner(dom.error, `Could not list the jobs: ${error.message}`);
    if (!dom.tbody.querySelector('tr[data-id]')) dom.tbody.replaceChildren(placeholderRow('Could not load the jobs.'));
  },
});

// ---- start

wireBannerClose(dom.error);
dom.tbody.addEventListener('click', rowClick);
$('refresh-jobs').addEventListener('click', () => feed.refresh());
feed.start();
card.init();
