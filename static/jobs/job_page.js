// One job's page (/jobs/<id>/): its state, log, loss chart, result, dataset preview and
// publishing (job_publish.js), kept live by /ws/jobs/<id>/ (or a 2 s poll of /api/jobs/<id> while the socket is down).

import { apiGet, apiPost } from '../lab/api.js';
import { el, formatDate, hideBanner, readJsonScript, showBanner, wireBannerClose } from '../lab/util.js';
import { CompareActions } from './job_compare.js';
import { artifactLink, clampProgress, formatDuration, formatEta, isFinished, jobSummary, setStatusBadge, shortId, socketUrl } from './job_format.js';
import { JobFeed } from './job_live.js';
import { DatasetPreview } from './job_preview.js';
import { definitionList, humanKey, valueView } from './job_result.js';
import { PublishPanel } from './job_publish.js';
import { LossPlot } from './loss_plot.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const STICKY_LOG_PX = 24; // this close to the bottom, the log follows new lines

const jobId = String(readJsonScript('job-id', ''));
const jobApi = `/api/jobs/${encodeURIComponent(jobId)}`;

const dom = {
  title: $('job-title'),
  live: $('job-live'),
  error: $('job-page-error'),
  status: $('job-status'),
  cancelling: $('job-cancelling'),
  progress: $('job-progress'),
  percent: $('job-percent'),
  eta: $('job-eta'),
  message: $('job-message'),
  failure: $('job-failure'),
  artifact: $('use-artifact'),
  meta: $('job-meta'),
  lossSection: $('loss-section'),
  lossStats: $('loss-stats'),
  resultSection: $('result-section'),
  result: $('job-result'),
  params: $('job-params'),
  log: $('job-log'),
  cancel: $('cancel-job'),
};

const showError = (message) => showBanner(dom.error, message);
const plot = new LossPlot($('loss-plot'));
const preview = new DatasetPreview(jobId, { onError: showError });
const publish = new PublishPanel(jobId, { onError: showError });
const compare = new CompareActions(jobId, {
  row: $('compare-row'),
  link: $('compare-link'),
  button: $('evaluate-against-base'),
  onError: showError,
});
let current = null;
let cancelClicked = false;
let pollFailed = false; // the banner shows a failed read, to be hidden once one works

// ---- formatting

const isNumber = (value) => typeof value === 'number' && Number.isFinite(value);

function definitions(pairs) {
  return pairs.flatMap(([term, value]) => [el('dt', {}, term), el('dd', {}, value)]);
}

// ---- rendering

function renderHeading(job) {
  const kind = job.kind ? job.kind.charAt(0).toUpperCase() + job.kind.slice(1) : 'Job';
  const summary = jobSummary(job);
  const parts = [`${kind} `, el('span', { class: 'mono' }, shortId(job.id))];
  if (summary) parts.push(el('span', { class: 'title-summary muted' }, summary));
  dom.title.replaceChildren(...parts); // (replaceChildren would write a null as "null")
  document.title = `${kind} ${shortId(job.id)} · MLX Lab`;
}

function renderState(job) {
  setStatusBadge(dom.status, job.status);
  const value = job.status === 'succeeded' ? 1 : clampProgress(job.progress);
  dom.progress.value = value;
  dom.percent.textContent = `${Math.round(value * 100)}%`;
  dom.eta.textContent = job.status === 'running' ? formatEta(job.eta_seconds) : '';
  dom.message.textContent = job.message || '';
  const failed = job.status === 'failed';
  dom.failure.textContent = failed ? job.error || 'The job failed.' : '';
  dom.failure.hidden = !failed;
}

function renderCancel(job) {
  const active = job.status === 'queued' || job.status === 'running';
  dom.cancel.hidden = !active;
  dom.cancel.disabled = cancelClicked || Boolean(job.cancel_requested);
  dom.cancel.textContent = dom.cancel.disabled ? 'Cancelling…' : 'Cancel job';
  dom.cancelling.hidden = !(active && job.cancel_requested);
}

function renderArtifact(job) {
  const link = artifactLink(job);
  dom.artifact.hidden = !link;
  if (!link) return;
  dom.artifact.href = link.href;
  dom.artifact.textContent = link.label;
}

function renderMeta(job) {
  const pairs = [
    ['Kind', job.kind || '—'],
    ['Owner', job.owner || '—'],
    ['Created', formatDate(job.created_at)],
    ['Started', formatDate(job.started_at)],
  ];
  if (job.finished_at) pairs.push(['Finished', formatDate(job.finished_at)]);
  const took = job.started_at ? formatDuration(job.started_at, job.finished_at) : '';
  if (took) pairs.push([job.finished_at ? 'Took' : 'Running for', took]);
  if (job.artifact_path) pairs.push(['Output folder', el('span', { class: 'mono' }, job.artifact_path)]);
  pairs.push(['Job id', el('span', { class: 'mono' }, String(job.id))]);
  dom.meta.replaceChildren(...definitions(pairs));
}

function renderLoss(job) {
  const finetune = job.kind === 'finetune';
  dom.lossSection.hidden = !finetune;
  if (!finetune) return;
  const metrics = job.metrics && typeof job.metrics === 'object' ? job.metrics : {};
  plot.update(metrics, job.params?.iters);
  const parts = [];
  if (isNumber(metrics.iteration)) parts.push(`iteration ${metrics.iteration}${isNumber(job.params?.iters) ? ` of ${job.params.iters}` : ''}`);
  if (isNumber(metrics.learning_rate)) parts.push(`learning rate ${metrics.learning_rate.toExponential(2)}`);
  if (isNumber(metrics.tokens_per_second)) parts.push(`${metrics.tokens_per_second.toFixed(0)} tokens/s`);
  if (isNumber(metrics.peak_memory_gb)) parts.push(`peak memory ${metrics.peak_memory_gb.toFixed(2)} GB`);
  dom.lossStats.textContent = parts.join(' · ');
}

function renderResult(job) {
  const result = job.result && typeof job.result === 'object' ? job.result : {};
  // A quantize job's evaluation is the comparison page's (#compare-link), not a blob here.
  const entries = Object.entries(result).filter(([key]) => key !== 'evaluation');
  dom.resultSection.hidden = entries.length === 0;
  dom.result.replaceChildren(...definitions(entries.map(([key, value]) => [humanKey(key), valueView(key, value)])));
}

// The parameters as the result is shown; redrawn only when they changed.
function renderParams(job) {
  const text = JSON.stringify(job.params ?? {});
  if (dom.params.dataset.shown === text) return;
  dom.params.dataset.shown = text;
  const entries = Object.entries(job.params && typeof job.params === 'object' ? job.params : {});
  dom.params.replaceChildren(entries.length ? definitionList(entries) : 'None.');
}

// Text is only replaced when it changed, so a selection in it survives other updates.
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function renderLog(job, first) {
  const log = dom.log;
  const following = first || log.scrollHeight - log.scrollTop - log.clientHeight < STICKY_LOG_PX;
  setText(log, job.log_tail || '');
  if (following) log.scrollTop = log.scrollHeight; // a user scrolled up to read stays put
}

function render(job) {
  if (!job || String(job.id) !== jobId) return;
  if (isFinished(current) && !isFinished(job)) return; // a late, older state: never go back
  const first = current === null;
  current = job;
  renderHeading(job);
  renderState(job);
  renderCancel(job);
  renderArtifact(job);
  renderMeta(job);
  renderLoss(job);
  renderResult(job);
  renderParams(job);
  renderLog(job, first);
  preview.update(job);
  publish.update(job);
  compare.update(job);
  if (isFinished(job)) {
    feed.stop(); // its last update has come: nothing more will
    dom.live.textContent = '';
    dom.live.dataset.status = 'finished';
  }
}

// ---- actions and live updates

async function cancelJob() {
  cancelClicked = true;
  dom.cancel.disabled = true;
  dom.cancel.textContent = 'Cancelling…';
  try {
    render(await apiPost(`${jobApi}/cancel`));
  } catch (error) {
    showError(`Could not cancel: ${error.message}`); // 409: it had already finished
    feed.refresh();
  }
}

function showLive(status, detail) {
  if (isFinished(current)) return;
  dom.live.dataset.status = status;
  if (status === 'live') dom.live.textContent = 'Live';
  else if (status === 'connecting') dom.live.textContent = 'Connecting…';
  else if (status === 'polling') dom.live.textContent = `Offline: refreshing every ${POLL_MS / 1000} s`;
  else {
    dom.live.textContent = 'Not updating';
    showError(detail);
  }
}

const feed = new JobFeed({
  url: socketUrl(`/ws/jobs/${encodeURIComponent(jobId)}/`),
  poll: async () => [await apiGet(jobApi)],
  pollMs: POLL_MS,
  onJobs: (jobs) => {
    if (pollFailed) hideBanner(dom.error);
    pollFailed = false;
    render(jobs[0]);
  },
  onJob: render,
  onStatus: showLive,
  onError: (error) => {
    pollFailed = true;
    showError(`Could not read the job: ${error.message}`);
  },
  shouldPoll: () => !isFinished(current),
});

wireBannerClose(dom.error);
dom.cancel.addEventListener('click', cancelJob);
feed.start();
