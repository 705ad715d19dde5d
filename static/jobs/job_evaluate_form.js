// The "New job" card's evaluate form: 1 to 4 variants (#evaluate-variants, each a model
// and an adapter of it; the first is the base of the comparison), an evaluation set (the
// shipped one or a finished dataset job's split) and at most how many examples.

import { apiGet, results } from '../lab/api.js';
import { el } from '../lab/util.js';
import { FormProblem } from './job_params.js';

const MAX_VARIANTS = 4;
const $ = (id) => document.getElementById(id);

export class EvaluateVariants {
  constructor({ onError }) {
    this.container = $('evaluate-variants');
    this.addButton = $('evaluate-add');
    this.onError = onError;
    this.models = [];
    this.addButton.addEventListener('click', () => this.add());
    this.container.addEventListener('click', (event) => {
      const row = event.target.closest('[data-action=remove]')?.closest('.evaluate-variant');
      if (row) this.remove(row);
    });
    this.container.addEventListener('change', (event) => {
      if (event.target.matches('.evaluate-model')) this.listAdapters(event.target.closest('.evaluate-variant'));
    });
    this.add();
  }

  rows() {
    return [...this.container.querySelectorAll('.evaluate-variant')];
  }

  setModels(models) {
    this.models = models.filter((model) => (model.capabilities || ['chat']).includes('chat'));
    for (const row of this.rows()) this.fillModels(row.querySelector('.evaluate-model'));
  }

  fillModels(select) {
    const chosen = select.value;
    const options = this.models.map((model) => el('option', { value: model.name }, model.name));
    select.replaceChildren(el('option', { value: '' }, 'Choose a model…'), ...options);
    select.value = chosen;
  }

  add() {
    if (this.rows().length >= MAX_VARIANTS) return;
    const model = el('select', { class: 'evaluate-model' });
    const adapter = el('select', { class: 'evaluate-adapter' }, el('option', { value: 'none' }, 'No adapter'));
    const row = el(
      'div',
      { class: 'evaluate-variant' },
      model,
      adapter,
      el('button', { type: 'button', class: 'small-button ghost', dataset: { action: 'remove' } }, 'Remove'),
    );
    this.fillModels(model);
    this.container.append(row);
    this.renumber();
  }

  remove(row) {
    if (this.rows().length <= 1) return;
    row.remove();
    this.renumber();
  }

  // Labels say which variant each select is; the first is the base.
  renumber() {
    const rows = this.rows();
    rows.forEach((row, index) => {
      const name = index === 0 ? 'Base' : `Variant ${index + 1}`;
      row.querySelector('.evaluate-model').setAttribute('aria-label', `${name}: model`);
      row.querySelector('.evaluate-adapter').setAttribute('aria-label', `${name}: adapter`);
      row.querySelector('[data-action=remove]').hidden = rows.length === 1;
    });
    this.addButton.disabled = rows.length >= MAX_VARIANTS;
  }

  async listAdapters(row) {
    const model = row.querySelector('.evaluate-model').value;
    const select = row.querySelector('.evaluate-adapter');
    let adapters = [];
    if (model) {
      try {
        adapters = results(await apiGet(`/api/adapters?model=${encodeURIComponent(model)}`));
      } catch (error) {
        this.onError(`Could not list the adapters of ${model}: ${error.message}`);
      }
    }
    const options = adapters.map((adapter) => el('option', { value: adapter.name }, adapter.name));
    select.replaceChildren(el('option', { value: 'none' }, 'No adapter'), ...options);
  }

  // -> [{model, adapter?}], or a FormProblem the form shows.
  collect() {
    return this.rows().map((row, index) => {
      const model = row.querySelector('.evaluate-model').value;
      if (!model) throw new FormProblem(`Choose a model for ${index === 0 ? 'the base' : `variant ${index + 1}`}.`);
      const adapter = row.querySelector('.evaluate-adapter').value;
      return adapter && adapter !== 'none' ? { model, adapter } : { model };
    });
  }
}

// The evaluation set: "builtin", or {job, split} of a finished dataset job.
export function evaluateDataset() {
  const source = $('evaluate-dataset').value;
  return source === 'builtin' ? 'builtin' : { job: source, split: $('evaluate-split').value };
}
