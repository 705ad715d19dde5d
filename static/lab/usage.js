// The usage page: /api/usage by day as a stacked bar chart (prompt and completion tokens),
// and the same range's totals by model, key or user as a table.
import { apiGet } from './api.js';
import { el, hideBanner, labelCells, showBanner, wireBannerClose } from './util.js';

const SVG = 'http://www.w3.org/2000/svg';
const CHART = { width: 720, height: 220, left: 56, bottom: 28, top: 8 };
const banner = document.getElementById('usage-error');
const form = document.getElementById('usage-form');
const start = document.getElementById('usage-start');
const end = document.getElementById('usage-end');
const group = document.getElementById('usage-group');

const isoDay = (date) => date.toISOString().slice(0, 10);
const number = (value) => value.toLocaleString();

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// Every day of the range, those without usage at zero, so the bars keep their places.
function days(from, to, rows) {
  const byDay = new Map(rows.map((row) => [row.group, row]));
  const out = [];
  for (let day = new Date(`${from}T00:00:00Z`); isoDay(day) <= to; day.setUTCDate(day.getUTCDate() + 1)) {
    const row = byDay.get(isoDay(day));
    out.push({ day: isoDay(day), prompt: row?.prompt_tokens || 0, completion: row?.completion_tokens || 0 });
  }
  return out;
}

function chart(series) {
  const { width, height, left, bottom, top } = CHART;
  const most = Math.max(1, ...series.map((d) => d.prompt + d.completion));
  const slot = (width - left) / series.length;
  const scale = (tokens) => ((height - bottom - top) * tokens) / most;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', class: 'usage-svg' });
  root.append(svg('title', {}, `Tokens per day, at most ${number(most)}`));
  root.append(svg('text', { x: left - 6, y: top + 10, 'text-anchor': 'end', class: 'axis' }, number(most)));
  root.append(svg('text', { x: left - 6, y: height - bottom, 'text-anchor': 'end', class: 'axis' }, '0'));
  series.forEach((d, i) => {
    const x = left + i * slot + slot * 0.15;
    const w = Math.max(1, slot * 0.7);
    const completion = scale(d.completion);
    const prompt = scale(d.prompt);
    const base = height - bottom;
    const tip = `${d.day}: ${number(d.prompt)} prompt, ${number(d.completion)} completion tokens`;
    const bar = svg('g', { class: 'usage-bar' });
    bar.append(svg('title', {}, tip));
    bar.append(svg('rect', { x, y: base - prompt, width: w, height: prompt, class: 'prompt' }));
    bar.append(svg('rect', { x, y: base - prompt - completion, width: w, height: completion, class: 'completion' }));
    root.append(bar);
    if (series.length <= 16 || i % Math.ceil(series.length / 8) === 0) {
      root.append(svg('text', { x: x + w / 2, y: height - 8, 'text-anchor': 'middle', class: 'axis' }, d.day.slice(5)));
    }
  });
  return root;
}

function legend() {
  return el('p', { class: 'usage-legend muted small' },
    el('span', { class: 'swatch prompt' }), ' prompt tokens ',
    el('span', { class: 'swatch completion' }), ' completion tokens');
}

function table(rows) {
  const body = document.querySelector('#usage-table tbody');
  body.replaceChildren(...(rows.length ? rows.map((row) => el('tr', {},
    el('td', { text: row.label || '—' }),
    el('td', { class: 'num', text: number(row.requests) }),
    el('td', { class: 'num', text: number(row.prompt_tokens) }),
    el('td', { class: 'num', text: number(row.cached_tokens) }),
    el('td', { class: 'num', text: number(row.completion_tokens) }),
    el('td', { class: 'num', text: number(row.total_tokens) }),
  )) : [el('tr', {}, el('td', { colspan: 6, class: 'muted', text: 'No usage in this range.' }))]));
  labelCells(document.getElementById('usage-table'));
}

async function show() {
  hideBanner(banner);
  const range = `start=${start.value}&end=${end.value}`;
  try {
    const [byDay, grouped] = await Promise.all([
      apiGet(`/api/usage?${range}&group_by=day`),
      apiGet(`/api/usage?${range}&group_by=${group.value}`),
    ]);
    const totals = byDay.totals;
    document.getElementById('usage-totals').textContent =
      `${number(totals.requests)} requests, ${number(totals.total_tokens)} tokens ` +
      `(${number(totals.prompt_tokens)} prompt, of which ${number(totals.cached_tokens)} cached; ` +
      `${number(totals.completion_tokens)} completion)`;
    document.getElementById('usage-chart').replaceChildren(
      chart(days(byDay.start, byDay.end, byDay.data)), legend());
    table(grouped.data);
  } catch (error) {
    showBanner(banner, error.message);
  }
}

const today = new Date();
end.value = isoDay(today);
start.value = isoDay(new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1)));
wireBannerClose(banner);
form.addEventListener('submit', (event) => {
  event.preventDefault();
  show();
});
group.addEventListener('change', show);
show();
