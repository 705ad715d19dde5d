// A finished dataset job's examples, a page at a time: #dataset-preview with
// #preview-split and #preview-prev / #preview-next, from GET /api/jobs/<id>/preview.

import { apiGet } from '../lab/api.js';
import { el } from '../lab/util.js';

const $ = (id) => document.getElementById(id);
const SPLITS = ['train', 'valid', 'test'];

function turn(role, content, extra = null) {
  return el('div', { class: 'preview-turn', dataset: { role } }, el('span', { class: 'preview-role' }, role), el('div', { class: 'preview-text' }, content), extra);
}

const compact = (value) => JSON.stringify(value);

// A chat (or tools) example as bubbles; tool calls and definitions as compact JSON.
function chatExample(example) {
  const turns = example.messages.map((message) => {
    const role = typeof message?.role === 'string' ? message.role : '?';
    const content = typeof message?.content === 'string' ? message.content : message?.content == null ? '' : compact(message.content);
    const calls = message?.tool_calls ? el('code', { class: 'preview-json' }, compact(message.tool_calls)) : null;
    return turn(role, content, calls);
  });
  if (Array.isArray(example.tools) && example.tools.length) {
    const names = example.tools.map((tool) => tool?.function?.name || tool?.name).filter(Boolean).join(', ');
    turns.unshift(el('details', { class: 'preview-tools' }, el('summary', {}, `${example.tools.length} tools: ${names}`), el('code', { class: 'preview-json' }, compact(example.tools))));
  }
  return el('div', { class: 'preview-chat' }, turns);
}

function exampleNode(example) {
  if (example && Array.isArray(example.messages)) return chatExample(example);
  if (example && typeof example.prompt === 'string' && typeof example.completion === 'string') {
    return el('div', { class: 'preview-chat' }, turn('prompt', example.prompt), turn('completion', example.completion));
  }
  if (example && typeof example.text === 'string') return el('div', { class: 'preview-text plain' }, example.text);
  return el('code', { class: 'preview-json' }, compact(example));
}

export class DatasetPreview {
  constructor(jobId, { onError }) {
    this.jobId = jobId;
    this.onError = onError;
    this.section = $('preview-section');
    this.split = $('preview-split');
    this.prev = $('preview-prev');
    this.next = $('preview-next');
    this.pageLabel = $('preview-page');
    this.tbody = $('dataset-preview').tBodies[0];
    this.page = 1;
    this.pages = 1;
    this.request = 0;
    this.shown = false;
    this.split.addEventListener('change', () => this.load(1));
    this.prev.addEventListener('click', () => this.load(this.page - 1));
    this.next.addEventListener('click', () => this.load(this.page + 1));
  }

  // Called with each state of the job; shows itself once the dataset is ready.
  update(job) {
    const ready = job.kind === 'dataset' && job.status === 'succeeded';
    this.section.hidden = !ready;
    if (!ready || this.shown) return;
    this.shown = true;
    const counts = job.result && typeof job.result.counts === 'object' ? job.result.counts : {};
    // The splits the job wrote (an empty one has nothing to page through).
    let splits = SPLITS.filter((name) => name in counts && counts[name] !== 0);
    if (!splits.length) splits = ['train'];
    this.split.replaceChildren(...splits.map((name) => el('option', { value: name }, counts[name] === undefined ? name : `${name} (${counts[name]})`)));
    this.load(1);
  }

  async load(page) {
    const request = ++this.request;
    const split = this.split.value;
    this.setButtons(false, false);
    this.tbody.setAttribute('aria-busy', 'true');
    const query = new URLSearchParams({ split, page: String(Math.max(1, page)) });
    let data;
    try {
      data = await apiGet(`/api/jobs/${encodeURIComponent(this.jobId)}/preview?${query}`);
    } catch (error) {
      if (request !== this.request) return;
      this.onError(`Could not read the ${split} examples: ${error.message}`);
      this.setButtons(this.page > 1, this.page < this.pages);
      this.tbody.removeAttribute('aria-busy');
      return;
    }
    if (request !== this.request) return; // another split or page was asked for meanwhile
    this.render(data);
  }

  render(data) {
    this.page = Number(data.page) || 1;
    this.pages = Number(data.pages) || 0;
    const size = Number(data.page_size) || (data.examples || []).length;
    const examples = Array.isArray(data.examples) ? data.examples : [];
    const first = (this.page - 1) * size;
    const rows = examples.map((example, index) =>
      el('tr', {}, el('td', { class: 'num muted' }, String(first + index + 1)), el('td', {}, exampleNode(example))),
    );
    if (!rows.length) rows.push(el('tr', { class: 'placeholder-row' }, el('td', { colspan: 2, class: 'muted' }, 'No examples in this split.')));
    this.tbody.replaceChildren(...rows);
    this.tbody.removeAttribute('aria-busy');
    const total = Number.isFinite(data.total) ? `, ${data.total} examples` : '';
    this.pageLabel.textContent = this.pages ? `Page ${this.page} of ${this.pages}${total}` : 'No examples';
    this.setButtons(this.page > 1, this.page < this.pages);
  }

  setButtons(prev, next) {
    this.prev.disabled = !prev;
    this.next.disabled = !next;
  }
}
