// The models page's "Compare texts" panel: two texts through an embedding model give their
// cosine similarity; through a reranker, the second text's relevance to the first. It calls
// the public API (/v1/embeddings, /v1/rerank) with the page's session, as a program would.

import { ApiError, apiPost } from './api.js';
import { el } from './util.js';

const $ = (id) => document.getElementById(id);

const dom = {
  panel: $('compare-panel'),
  form: $('compare-form'),
  model: $('compare-model'),
  first: $('compare-first'),
  second: $('compare-second'),
  button: $('compare-button'),
  result: $('compare-result'),
  error: $('compare-error'),
};

function cosine(a, b) {
  let dot = 0;
  let normA = 0;
  let normB = 0;
  for (let i = 0; i < a.length; i += 1) {
    dot += a[i] * b[i];
    normA += a[i] * a[i];
    normB += b[i] * b[i];
  }
  return normA && normB ? dot / Math.sqrt(normA * normB) : 0;
}

// OpenAI's error shape ({"error": {"message"}}) reads better than the wrapper's flattening.
function errorText(error) {
  const message = error instanceof ApiError ? error.body?.error?.message : null;
  return message || error.message;
}

async function measure(model, task, first, second) {
  if (task === 'rerank') {
    const answer = await apiPost('/v1/rerank', { model, query: first, documents: [second], return_documents: false });
    return { label: 'relevance of the second text to the first', value: answer.results[0].relevance_score };
  }
  const answer = await apiPost('/v1/embeddings', { model, input: [first, second] });
  const [a, b] = [...answer.data].sort((x, y) => x.index - y.index).map((item) => item.embedding);
  return { label: `cosine similarity (${a.length} dimensions)`, value: cosine(a, b) };
}

function showResult({ label, value }) {
  // A bar from 0 to 1; a cosine below 0 shows as an empty bar beside its figure.
  const meter = el('meter', { min: '0', max: '1', value: String(Math.max(0, Math.min(1, value))) });
  dom.result.replaceChildren(el('strong', { class: 'compare-value' }, value.toFixed(4)), ' ', el('span', { class: 'muted small' }, label), meter);
  dom.result.hidden = false;
}

async function compare(event) {
  event.preventDefault();
  const first = dom.first.value.trim();
  const second = dom.second.value.trim();
  dom.error.hidden = true;
  if (!first || !second) {
    dom.error.textContent = 'Write two texts to compare.';
    dom.error.hidden = false;
    return;
  }
  const option = dom.model.selectedOptions[0];
  dom.button.disabled = true;
  dom.button.textContent = 'Comparing…';
  try {
    showResult(await measure(option.value, option.dataset.task, first, second));
  } catch (error) {
    dom.result.hidden = true;
    dom.error.textContent = errorText(error);
    dom.error.hidden = false;
  } finally {
    dom.button.disabled = false;
    dom.button.textContent = 'Compare';
  }
}

// The registry's embedding models and rerankers; the panel shows only when there is one.
export function updateComparePanel(models) {
  const usable = models.filter((m) => (m.capabilities || []).some((c) => c === 'embeddings' || c === 'rerank'));
  const chosen = dom.model.value;
  dom.model.replaceChildren(
    ...usable.map((m) => {
      const task = (m.capabilities || []).includes('rerank') ? 'rerank' : 'embeddings';
      return el('option', { value: m.name, dataset: { task } }, `${m.name} (${task})`);
    }),
  );
  if (usable.some((m) => m.name === chosen)) dom.model.value = chosen;
  dom.panel.hidden = usable.length === 0;
}

dom.form.addEventListener('submit', compare);
