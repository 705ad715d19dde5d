// The settings page's Hugging Face token card (staff only; the template loads this
// module only for them): save, replace or delete the lab's one token through
// /api/settings/hf-token. The server never sends the token back, and neither does this
// page keep it: the input is cleared as soon as the server has it.

import { apiDelete, apiGet, apiPost } from './api.js';

const ENDPOINT = '/api/settings/hf-token';
const $ = (id) => document.getElementById(id);

const dom = {
  form: $('hf-token-form'),
  status: $('hf-token-status'),
  input: $('hf-token-input'),
  save: $('hf-token-save'),
  remove: $('hf-token-delete'),
  error: $('hf-token-error'),
};

function showError(message) {
  dom.error.textContent = message;
  dom.error.hidden = false;
}

function clearError() {
  dom.error.textContent = '';
  dom.error.hidden = true;
}

// What a save learnt about the token, said after the status; a plain read says nothing
// (the server does not re-check the Hub on GET).
function verification(answer) {
  if (!answer || answer.verified === undefined) return '';
  if (answer.verified) return answer.username ? ` (verified as ${answer.username})` : ' (verified)';
  return ' (not verified: the Hub could not be reached)';
}

function showState(answer) {
  const saved = Boolean(answer?.hasToken);
  dom.status.textContent = (saved ? 'A token is saved.' : 'No token saved.') + verification(answer);
  dom.status.dataset.hasToken = String(saved);
  dom.remove.disabled = !saved;
}

async function load() {
  try {
    showState(await apiGet(ENDPOINT));
  } catch (error) {
    dom.status.textContent = 'Could not tell whether a token is saved.';
    showError(error.message);
  }
}

// Both buttons are held while a request runs, so a save and a delete cannot cross.
function setBusy(busy) {
  dom.save.disabled = busy;
  dom.remove.disabled = busy || dom.status.dataset.hasToken !== 'true';
}

async function save(event) {
  event.preventDefault();
  setBusy(true);
  try {
    const answer = await apiPost(ENDPOINT, { token: dom.input.value.trim() });
    dom.input.value = '';
    clearError();
    showState(answer);
  } catch (error) {
    showError(error.message); // e.g. "token required", "the Hub rejected this token: ..."
  } finally {
    setBusy(false);
  }
}

async function remove() {
  if (!window.confirm('Delete the Hugging Face token? Publishing will stop working until a new one is saved.')) return;
  setBusy(true);
  try {
    showState(await apiDelete(ENDPOINT));
    clearError();
  } catch (error) {
    showError(error.message);
  } finally {
    setBusy(false);
  }
}

if (dom.form) {
  dom.form.addEventListener('submit', save);
  dom.remove.addEventListener('click', remove);
  load();
}
