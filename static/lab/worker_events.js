// The models page's "Worker events" panel (staff): the model workers' lifecycle as
// GET /api/events streams it (starting, ready, draining, restarting, exit, load, evict,
// unload, adapter_mount, adapter_unmount). EventSource reconnects by itself and sends
// Last-Event-ID, so nothing is missed.

import { el } from './util.js';

const KINDS = ['starting', 'ready', 'draining', 'restarting', 'exit', 'load', 'evict', 'unload', 'adapter_mount', 'adapter_unmount'];
const SHOWN = 30;

function describe(kind, data) {
  const detail = data.detail || {};
  if (kind === 'exit') {
    const how = detail.signal ? `signal ${detail.signal}` : detail.link ? `lost the link to ${detail.link}` : `exit code ${detail.code}`;
    return `${how}${detail.expected ? ' (stopped by the lab)' : ''}`;
  }
  if (kind === 'restarting') return `in ${detail.after_seconds} s`;
  if (kind === 'evict') return `to make room for ${detail.to_load}`;
  if (kind === 'unload') return detail.reason === 'idle' ? 'idle' : 'asked';
  if (kind === 'starting') return `pid ${detail.pid}`;
  if (kind === 'load') return `${detail.replicas} worker${detail.replicas === 1 ? '' : 's'}`;
  if (kind === 'adapter_mount') return detail.adapter;
  if (kind === 'adapter_unmount') {
    const why = detail.reason ? ` (${detail.reason})` : detail.deferred ? ' (after the requests using it)' : '';
    return `${detail.adapter}${why}`;
  }
  return '';
}

function eventItem(kind, data) {
  const time = new Date(data.time * 1000).toLocaleTimeString();
  return el(
    'li',
    { class: `worker-event event-${kind}`, dataset: { kind, model: data.model } },
    el('time', { class: 'muted small' }, time),
    ' ',
    el('span', { class: 'badge' }, kind),
    ' ',
    el('strong', {}, data.model),
    data.worker !== data.model ? el('span', { class: 'muted small' }, ` ${data.worker}`) : null,
    ' ',
    el('span', { class: 'muted small' }, describe(kind, data)),
  );
}

// `onChange` runs after an event that changes what the table shows (a load, a stop).
export function watchWorkerEvents(list, onChange) {
  const source = new EventSource('/api/events');
  for (const kind of KINDS) {
    source.addEventListener(kind, (message) => {
      list.prepend(eventItem(kind, JSON.parse(message.data)));
      while (list.children.length > SHOWN) list.lastElementChild.remove();
      if (kind === 'ready' || kind === 'exit' || kind === 'draining') onChange();
    });
  }
  return source;
}
