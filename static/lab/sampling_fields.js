// The sampling fields the chat page and the side-by-side page share
// (templates/lab/sampling_fields.html): preset, system prompt, the parameters and the stop
// strings. The chat's panel adds the model and what depends on it; on the side-by-side
// page the same values go to every variant.

import { apiDelete, apiGet, apiPost, results } from './api.js';
import { el } from './util.js';

export const PARAMS = [
  { key: 'temperature', integer: false },
  { key: 'top_p', integer: false },
  { key: 'top_k', integer: true },
  { key: 'min_p', integer: false },
  { key: 'max_tokens', integer: true },
  { key: 'repetition_penalty', integer: false },
  { key: 'seed', integer: true, placeholder: 'random' }, // no default: empty means a random seed
  { key: 'num_draft_tokens', integer: true, placeholder: 'auto' }, // chat only: the engine's choice
];
const NO_DEFAULT_FILL = new Set(['seed', 'num_draft_tokens']);

const $ = (id) => document.getElementById(id);

export class SamplingFields {
  constructor() {
    this.systemPrompt = $('system-prompt');
    this.stop = $('param-stop');
    // Only the fields this page has (the draft fields are the chat's).
    this.params = PARAMS.filter(({ key }) => $(`param-${key}`));
    this.inputs = new Map(this.params.map(({ key }) => [key, $(`param-${key}`)]));
    for (const input of this.inputs.values()) {
      // A value the user typed survives a model change; untouched ones follow the model.
      input.addEventListener('input', () => {
        input.dataset.dirty = '1';
      });
    }
  }

  // Placeholders show `defaults` (what the server uses for an empty field); with `fill`,
  // untouched fields take `starts` as their values.
  applyDefaults(defaults, starts, fill) {
    for (const { key, placeholder } of this.params) {
      const input = this.inputs.get(key);
      const fallback = defaults[key];
      const value = starts[key];
      input.placeholder = fallback === undefined || fallback === null ? placeholder || '' : String(fallback);
      // The field being typed in keeps its text: the details can arrive mid-keystroke.
      const editing = document.activeElement === input;
      if (fill && !input.dataset.dirty && !editing && !NO_DEFAULT_FILL.has(key)) {
        input.value = value === undefined || value === null ? '' : String(value);
      }
    }
  }

  set(params, { dirty }) {
    for (const [key, input] of this.inputs) {
      const value = params[key];
      input.value = value === undefined || value === null ? '' : String(value);
      if (dirty && input.value !== '') input.dataset.dirty = '1';
      else delete input.dataset.dirty;
    }
    this.stop.value = Array.isArray(params.stop) ? params.stop.join('\n') : '';
  }

  read() {
    const params = {};
    for (const { key, integer } of this.params) {
      const text = this.inputs.get(key).value.trim();
      if (text === '') continue; // empty: the server's default (for seed: random)
      const number = Number(text);
      if (!Number.isFinite(number)) continue;
      params[key] = integer ? Math.trunc(number) : number;
    }
    const stops = this.stop.value.split('\n').filter((line) => line.trim() !== '');
    if (stops.length) params.stop = stops;
    return params;
  }
}

// The preset picker (#preset-picker, #save-preset, #delete-preset): a saved system prompt
// with parameters. read() gives the parameters to save, apply(preset) puts one in place.
export class PresetPicker {
  constructor({ systemPrompt, read, apply, onError }) {
    this.systemPrompt = systemPrompt;
    this.read = read;
    this.apply = apply;
    this.onError = onError;
    this.presets = [];
    this.picker = $('preset-picker');
    this.picker.addEventListener('change', () => this.applySelected());
    $('save-preset').addEventListener('click', () => this.save());
    $('delete-preset').addEventListener('click', () => this.remove());
  }

  async load(selectId = '') {
    try {
      this.presets = results(await apiGet('/api/presets'));
    } catch (error) {
      this.onError(`Could not list the presets: ${error.message}`);
      this.presets = [];
    }
    const options = this.presets.map((preset) => el('option', { value: String(preset.id) }, preset.name));
    this.picker.replaceChildren(el('option', { value: '' }, 'Choose a preset…'), ...options);
    this.picker.value = selectId ? String(selectId) : '';
  }

  clear() {
    this.picker.value = '';
  }

  selected() {
    return this.presets.find((preset) => String(preset.id) === this.picker.value) || null;
  }

  applySelected() {
    const preset = this.selected();
    if (!preset) return;
    this.systemPrompt.value = preset.system_prompt || '';
    this.apply(preset);
  }

  async save() {
    const current = this.selected();
    const name = window.prompt('Save the system prompt and parameters as preset:', current ? current.name : '');
    if (name === null || !name.trim()) return;
    try {
      const body = { name: name.trim(), system_prompt: this.systemPrompt.value, params: this.read() };
      const saved = await apiPost('/api/presets', body);
      await this.load(saved.id);
    } catch (error) {
      this.onError(`Could not save the preset: ${error.message}`);
    }
  }

  async remove() {
    const preset = this.selected();
    if (!preset || !window.confirm(`Delete the preset "${preset.name}"?`)) return;
    try {
      await apiDelete(`/api/presets/${encodeURIComponent(preset.id)}`);
      await this.load();
    } catch (error) {
      this.onError(`Could not delete the preset: ${error.message}`);
    }
  }
}
