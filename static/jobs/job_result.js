// A job's result and parameters as the page shows them: figures formatted, lists of
// records (an evaluation's variants) as tables, nested objects as nested definition
// lists. Nothing is shown as raw JSON, and an empty value reads "—", never null.

import { el, formatBytes } from '../lab/util.js';

const isNumber = (value) => typeof value === 'number' && Number.isFinite(value);
const isScalar = (value) => value === null || value === undefined || ['string', 'number', 'boolean'].includes(typeof value);
const isRecord = (value) => Boolean(value) && typeof value === 'object' && !Array.isArray(value);

export function formatNumber(value) {
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
}

export function humanKey(key) {
  const words = String(key).replace(/_bytes$/, '').replaceAll('_', ' ');
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function scalarText(key, value) {
  if (value === null || value === undefined || value === '') return '—';
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  if (isNumber(value)) return /bytes$/.test(key) ? formatBytes(value) : formatNumber(value);
  return String(value);
}

// Rows of records: one column per key any of them has, in first-seen order.
function recordTable(rows) {
  const keys = [...new Set(rows.flatMap((row) => Object.keys(row)))];
  const head = el('tr', {}, keys.map((key) => el('th', { scope: 'col', class: rows.some((row) => isNumber(row[key])) ? 'num' : null }, humanKey(key))));
  const body = rows.map((row) =>
    el('tr', {}, keys.map((key) => el('td', { class: isNumber(row[key]) ? 'num' : null }, valueView(key, row[key])))),
  );
  return el('div', { class: 'table-wrap result-table' }, el('table', { class: 'data-table' }, el('thead', {}, head), el('tbody', {}, body)));
}

// One value, as text or as an element.
export function valueView(key, value) {
  if (isScalar(value)) return scalarText(key, value);
  if (Array.isArray(value)) {
    if (value.length === 0) return '—';
    if (value.every(isScalar)) return value.map((item) => scalarText(key, item)).join(', ');
    if (value.every(isRecord)) return recordTable(value);
    return el('ol', { class: 'result-list' }, value.map((item) => el('li', {}, valueView(key, item))));
  }
  return definitionList(Object.entries(value), 'details-list nested-details');
}

export function definitionList(entries, className = 'details-list') {
  const items = entries.flatMap(([key, value]) => [el('dt', {}, humanKey(key)), el('dd', {}, valueView(key, value))]);
  return el('dl', { class: className }, items);
}
