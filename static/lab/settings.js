// The settings page: the user's API keys (list, create, revoke). Revoked keys are hidden
// unless #show-revoked is checked; the table shows PAGE_SIZE keys a page (#keys-pager).

import { apiDelete, apiGet, apiPost, results } from './api.js';
import { copyWithFeedback, el, formatDate, hideBanner, labelCells, showBanner, wireBannerClose } from './util.js';

const $ = (id) => document.getElementById(id);

const dom = {
  tbody: $('keys-table').tBodies[0],
  error: $('keys-error'),
  form: $('key-form'),
  label: $('key-label'),
  create: $('create-key'),
  newKey: $('new-key'),
  newKeyValue: $('new-key-value'),
  copyNewKey: $('copy-new-key'),
  showRevoked: $('show-revoked'),
  revokedCount: $('revoked-count'),
  pager: $('keys-pager'),
  prev: $('keys-prev'),
  next: $('keys-next'),
  page: $('keys-page'),
};
const PAGE_SIZE = 10;
let keys = [];
let page = 0;

// `active` wins when present; without it, a key is active until it has a revoked_at.
function isActive(key) {
  return typeof key.active === 'boolean' ? key.active : !key.revoked_at;
}

function keyStatus(key) {
  if (isActive(key)) return el('span', { class: 'badge ok' }, 'active');
  const when = key.revoked_at ? ` ${formatDate(key.revoked_at)}` : '';
  return el('span', { class: 'badge muted' }, `revoked${when}`);
}

function keyRow(key) {
  const active = isActive(key);
  const revoke = active
    ? el('button', { type: 'button', class: 'small-button danger', dataset: { action: 'revoke' } }, 'Revoke')
    : null;
  return el(
    'tr',
    { dataset: { id: String(key.id) }, class: active ? '' : 'revoked' },
    el('td', {}, key.label || el('span', { class: 'muted' }, '(no label)')),
    el('td', { class: 'mono' }, `${key.prefix || ''}…`),
    el('td', {}, formatDate(key.created_at)),
    el('td', {}, key.last_used_at ? formatDate(key.last_used_at) : 'never'),
    el('td', {}, keyStatus(key)),
    el('td', { class: 'row-actions' }, revoke),
  );
}

function placeholderRow(text) {
  return el('tr', { class: 'placeholder-row' }, el('td', { colspan: 6, class: 'muted' }, text));
}

function render() {
  const revoked = keys.filter((key) => !isActive(key)).length;
  dom.revokedCount.textContent = revoked ? `(${revoked})` : '';
  dom.showRevoked.closest('.table-bar').hidden = revoked === 0; // nothing to show
  const shown = dom.showRevoked.checked ? keys : keys.filter(isActive);
  const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
  page = Math.min(page, pages - 1);
  const rows = shown.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).map(keyRow);
  const none = keys.length ? 'No active keys: check "Show revoked keys" to see the others.' : 'No API keys yet.';
  dom.tbody.replaceChildren(...(rows.length ? rows : [placeholderRow(none)]));
  labelCells($('keys-table'));
  dom.pager.hidden = pages < 2;
  dom.page.textContent = `Page ${page + 1} of ${pages}`;
  dom.prev.disabled = page === 0;
  dom.next.disabled = page >= pages - 1;
}

async function refreshKeys() {
  try {
    keys = results(await apiGet('/api/keys'));
    render();
  } catch (error) {
    showBanner(dom.error, `Could not list the keys: ${error.message}`);
    dom.tbody.replaceChildren(placeholderRow('Could not load the keys.'));
  }
}

async function createKey(event) {
  event.preventDefault();
  dom.create.disabled = true;
  try {
    const created = await apiPost('/api/keys', { label: dom.label.value.trim() });
    // The only time the whole key exists outside the server's hash: show it now.
    dom.newKeyValue.textContent = created.key;
    dom.newKey.hidden = false;
    dom.form.reset();
    hideBanner(dom.error);
    await refreshKeys();
  } catch (error) {
    showBanner(dom.error, `Could not create the key: ${error.message}`);
  } finally {
    dom.create.disabled = false;
  }
}

async function revokeKey(row, button) {
  const label = row.querySelector('td')?.textContent || 'this key';
  if (!window.confirm(`Revoke the key "${label}"? Programs using it stop working at once.`)) return;
  button.disabled = true;
  try {
    await apiDelete(`/api/keys/${encodeURIComponent(row.dataset.id)}`);
    hideBanner(dom.error);
  } catch (error) {
    showBanner(dom.error, `Could not revoke the key: ${error.message}`);
  }
  await refreshKeys();
}

wireBannerClose(dom.error);
dom.showRevoked.addEventListener('change', () => {
  page = 0;
  render();
});
dom.prev.addEventListener('click', () => {
  page -= 1;
  render();
});
dom.next.addEventListener('click', () => {
  page += 1;
  render();
});
dom.form.addEventListener('submit', createKey);
dom.copyNewKey.addEventListener('click', () => copyWithFeedback(dom.copyNewKey, dom.newKeyValue.textContent));
$('keys-table').addEventListener('click', (event) => {
  const button = event.target.closest('button[data-action=revoke]');
  const row = button?.closest('tr[data-id]');
  if (row) revokeKey(row, button);
});
refreshKeys();
