// The chat settings' adapter picker (#adapter-picker): the fine-tuned adapters of the
// selected model, from GET /api/adapters?model=. Its value ("none", a name, or names
// joined with "+") goes in every chat request as `adapter`.

import { apiGet, results } from './api.js';
import { el } from './util.js';

export const NO_ADAPTER = 'none';

function adapterLabel(adapter) {
  const type = adapter.fine_tune_type ? ` (${adapter.fine_tune_type})` : '';
  return `${adapter.name}${type}`;
}

export class AdapterPicker {
  constructor({ select, onError }) {
    this.select = select;
    this.onError = onError;
    this.request = 0;
    this.wanted = null; // a value asked for by a conversation or the URL, kept across the next list
  }

  value() {
    return this.select.value || NO_ADAPTER;
  }

  // Selects `name` now and keeps it when the model's adapters are listed next, even if
  // it is not among them (a deleted adapter still shows what the conversation used).
  want(name) {
    this.wanted = name || NO_ADAPTER;
    this.ensureOption(this.wanted, this.wanted);
  }

  // The model changed: list its adapters. A user's choice stays only if the new model
  // has an adapter of that name; adapters are trained for one base model.
  async refresh(model) {
    const request = ++this.request;
    const wanted = this.wanted; // for this model only: a later model change drops it
    this.wanted = null;
    let adapters = [];
    let listed = true;
    if (model) {
      try {
        adapters = results(await apiGet(`/api/adapters?model=${encodeURIComponent(model)}`));
      } catch (error) {
        listed = false;
        if (request === this.request) this.onError(`Could not list the adapters of ${model}: ${error.message}`);
      }
    }
    if (request !== this.request) return; // the model changed again meanwhile
    // Read after the wait: the user may have picked one while the list loaded.
    const keep = wanted ?? this.value();
    this.render(adapters);
    if ([...this.select.options].some((option) => option.value === keep)) this.select.value = keep;
    else if (wanted && wanted !== NO_ADAPTER) this.ensureOption(wanted, listed ? `${wanted} (not found)` : wanted);
    else this.select.value = NO_ADAPTER;
  }

  render(adapters) {
    const options = adapters
      .filter((adapter) => adapter && typeof adapter.name === 'string')
      .map((adapter) => el('option', { value: adapter.name }, adapterLabel(adapter)));
    this.select.replaceChildren(el('option', { value: NO_ADAPTER }, 'No adapter'), ...options);
  }

  ensureOption(name, label) {
    if (![...this.select.options].some((option) => option.value === name)) {
      // Several adapters applied together are named "a+b".
      this.select.append(el('option', { value: name }, label.replaceAll('+', ' + ')));
    }
    this.select.value = name;
  }
}
