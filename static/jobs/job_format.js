// Small pieces shared by the jobs list and the job page: status badges, short ids,
// human durations, one-line summaries and the "use what it made" link.

import { el } from '../lab/util.js';

export const FINISHED = new Set(['succeeded', 'failed', 'cancelled']);

export const isFinished = (job) => Boolean(job) && FINISHED.has(job.status);

// Job ids are UUIDs: eight hex digits are plenty to tell a lab's jobs apart.
export const shortId = (id) => String(id ?? '').slice(0, 8);

export const jobUrl = (id) => `/jobs/${encodeURIComponent(id)}/`;

export function socketUrl(path) {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  return `${scheme}://${location.host}${path}`;
}

// The badge's text is exactly the status: the browser tests read it.
export function statusBadge(status, attrs = {}) {
  return el('span', { ...attrs, class: 'badge status-badge', dataset: { status: status || 'unknown' } }, status || '—');
}

export function setStatusBadge(badge, status) {
  badge.textContent = status || '—';
  badge.dataset.status = status || 'unknown';
}

export function clampProgress(value) {
  const number = Number(value);
  return Number.isFinite(number) ? Math.min(Math.max(number, 0), 1) : 0;
}

// "about 2 min left": an ETA is a guess, so it is never shown to the second.
export function formatEta(seconds) {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) return '';
  if (seconds < 60) return 'less than a minute left';
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `about ${minutes} min left`;
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return rest ? `about ${hours} h ${rest} min left` : `about ${hours} h left`;
}

export function formatDuration(startIso, endIso) {
  const start = Date.parse(startIso);
  const end = endIso ? Date.parse(endIso) : Date.now();
  if (!Number.isFinite(start) || !Number.isFinite(end) || end < start) return '';
  const seconds = Math.round((end - start) / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${seconds % 60} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

// What the job works on, in a few words ("tiny → tiny-4bit").
export function jobSummary(job) {
  const params = job?.params && typeof job.params === 'object' ? job.params : {};
  if (job?.kind === 'quantize') return [params.model, params.name].filter(Boolean).join(' → ');
  if (job?.kind === 'finetune') return [params.model, params.adapter_name].filter(Boolean).join(' → ');
  if (job?.kind === 'dataset') return params.name || '';
  if (job?.kind === 'publish') return params.repo_id || '';
  if (job?.kind === 'pull') return params.repo_id || '';
  if (job?.kind === 'evaluate' && Array.isArray(params.variants)) return params.variants.map(variantName).filter(Boolean).join(' vs ');
  return '';
}

// An evaluation's variant: "model" or "model + adapter".
function variantName(variant) {
  if (typeof variant === 'string') return variant;
  if (!variant || typeof variant !== 'object' || !variant.model) return '';
  return variant.adapter && variant.adapter !== 'none' ? `${variant.model} + ${variant.adapter}` : variant.model;
}

// Results may name a thing by string or as an object with a name.
function nameOf(value) {
  if (typeof value === 'string') return value;
  return value && typeof value === 'object' && typeof value.name === 'string' ? value.name : '';
}

function chatUrl(model, adapter) {
  const query = new URLSearchParams({ model });
  if (adapter) query.set('adapter', adapter);
  return `/?${query}`;
}

// The link to use what a succeeded job made (docs/LAB_UI.md), or null.
export function artifactLink(job) {
  if (!job || job.status !== 'succeeded') return null;
  const result = job.result && typeof job.result === 'object' ? job.result : {};
  const params = job.params && typeof job.params === 'object' ? job.params : {};
  if (job.kind === 'quantize') {
    const model = nameOf(result.model) || params.name;
    return model ? { href: chatUrl(model), label: `Chat with ${model}` } : null;
  }
  if (job.kind === 'finetune') {
    const fused = nameOf(result.model);
    if (fused) return { href: chatUrl(fused), label: `Chat with ${fused}` };
    const adapter = nameOf(result.adapter) || params.adapter_name;
    if (adapter && params.model) {
      return { href: chatUrl(params.model, adapter), label: `Chat with ${params.model} + ${adapter}` };
    }
    return null;
  }
  if (job.kind === 'dataset') {
    const query = new URLSearchParams({ finetune_dataset: job.id });
    return { href: `/jobs/?${query}`, label: 'Fine-tune on this dataset' };
  }
  return null; // a publish job made nothing to use here: #publish-url links to the Hub
}
