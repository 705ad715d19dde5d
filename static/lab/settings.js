// The settings page: the user's API keys (list, create, revoke).

import { apiDelete, apiGet, apiPost, results } from './api.js';
import { copyWithFeedback, el, formatDate, hideBanner, showBanner, wireBannerClose } from './util.js';

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
};

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

async function refreshKeys() {
  try {
    const keys = results(await apiGet('/api/keys'));
    dom.tbody.replaceChildren(...(keys.length ? keys.map(keyRow) : [placeholderRow('No API keys yet.')]));
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
dom.form.addEventListener('submit', createKey);
dom.copyNewKey.addEventListener('click', () => copyWithFeedback(dom.copyNewKey, dom.newKeyValue.textContent));
$('keys-table').addEventListener('click', (event) => {
  const button = event.target.closest('button[data-action=revoke]');
  const row = button?.closest('tr[data-id]');
  if (row) revokeKey(row, button);
});
refreshKeys();
