// The chat page's right-hand settings panel: model, adapter, system prompt, sampling
// parameters, thinking switch, presets and structured output. `collect()` builds the
// settings part of each websocket request ({model, adapter, system_prompt, params,
// thinking, structured}); params carry the draft source (speculative decoding) too.
// The preset, system prompt and parameters are sampling_fields.js, shared with the
// side-by-side page.

import { apiGet, chats, results } from './api.js';
import { AdapterPicker, NO_ADAPTER } from './chat_adapters.js';
import { PresetPicker, SamplingFields } from './sampling_fields.js';
import { debounce, el } from './util.js';

// The draft choices every model has; registered models follow them.
const DRAFT_METHODS = [
  ['', "Model's default"],
  ['none', 'Off'],
  ['ngram', 'Prompt lookup'],
];

const STRUCTURED_HINTS = {
  none: 'No constraint',
  json_schema: '{"type": "object", "properties": {…}}',
  regex: 'A regular expression the reply must match',
  choice: 'One choice per line',
};

const $ = (id) => document.getElementById(id);

export class SettingsPanel {
  // chatMaxTokens: where the page's max tokens starts (MLXLAB_CHAT_MAX_TOKENS), capped by
  // the model's context; the API's own default (the model's defaults) is its placeholder.
  // onModelChange(name): another model is picked (its capabilities: capabilities()).
  constructor({ defaultModel, chatMaxTokens, onError, onModelChange = () => {} }) {
    this.defaultModel = defaultModel || '';
    this.onModelChange = onModelChange;
    this.chatMaxTokens = Number.isInteger(chatMaxTokens) && chatMaxTokens > 0 ? chatMaxTokens : null;
    this.onError = onError;
    this.models = [];
    this.modelInfo = null;
    this.detailsRequest = 0;
    this.fillDefaults = true; // a new chat takes the model's defaults as its values
    this.picker = $('model-picker');
    this.adapters = new AdapterPicker({ select: $('adapter-picker'), onError });
    this.fields = new SamplingFields();
    this.systemPrompt = this.fields.systemPrompt;
    this.draft = $('param-draft_model');
    this.thinking = $('thinking-toggle');
    this.thinkingField = $('thinking-field');
    this.presets = new PresetPicker({
      systemPrompt: this.systemPrompt,
      read: () => this.readParams(),
      apply: (preset) => this.setParams(preset.params || {}, { dirty: true }),
      onError,
    });
    this.structuredKind = $('structured-kind');
    this.structuredValue = $('structured-value');
    this.structuredError = $('structured-error');
    this.wire();
  }

  wire() {
    this.picker.addEventListener('change', () => this.modelChanged());
    this.structuredKind.addEventListener('change', () => this.structuredKindChanged());
    const check = debounce(() => this.readStructured({ quietWhenEmpty: true }), 300);
    this.structuredValue.addEventListener('input', check);
  }

  async init() {
    this.structuredKindChanged();
    await Promise.all([this.loadModels(), this.presets.load()]);
  }

  // ---- models

  async loadModels() {
    try {
      this.models = results(await apiGet('/api/models')).filter(chats);
    } catch (error) {
      this.onError(`Could not list the models: ${error.message}`);
      this.models = [];
    }
    // Selected at once, so the first answer cannot undo a choice the user makes later.
    this.renderModelOptions(this.picker.value || this.fallbackModel());
  }

  renderModelOptions(selected) {
    const options = this.models.map((model) => {
      let label = model.name;
      if (model.loaded) label += ' — loaded';
      if (model.default) label += ' (default)';
      return el('option', { value: model.name }, label);
    });
    this.picker.replaceChildren(...options);
    if (selected) this.ensureModelOption(selected);
    this.renderDraftOptions(this.draft.value);
  }

  // Drafts from another registered model (the server refuses one whose vocabulary differs,
  // naming both), by prompt lookup, none, or the chosen model's own default draft.
  renderDraftOptions(selected) {
    const fallback = this.modelInfo?.draft_model;
    const options = DRAFT_METHODS.map(([value, label]) =>
      el('option', { value }, value === '' && fallback ? `${label} (${fallback})` : label),
    );
    for (const model of this.models) options.push(el('option', { value: model.name }, `Model ${model.name}`));
    this.draft.replaceChildren(...options);
    this.selectDraft(selected);
  }

  selectDraft(value) {
    const exists = [...this.draft.options].some((option) => option.value === value);
    if (!exists) this.draft.append(el('option', { value }, `Model ${value}`));
    this.draft.value = value;
  }

  // A conversation may name a model that is no longer registered: still show it.
  ensureModelOption(name) {
    const exists = [...this.picker.options].some((option) => option.value === name);
    // With no list at all (the request failed) "not installed" would be a guess.
    const label = this.models.length ? `${name} (not installed)` : name;
    if (!exists) this.picker.append(el('option', { value: name }, label));
    this.picker.value = name;
  }

  // Whether the model is known to be loaded now (false when not, or not listed).
  isLoaded(name) {
    return Boolean(this.models.find((model) => model.name === name)?.loaded);
  }

  // What the model takes ("vision", "audio", ...); null when it is not listed.
  capabilities(name) {
    const model = this.models.find((item) => item.name === name);
    return model ? model.capabilities || [] : null;
  }

  fallbackModel() {
    if (this.defaultModel) return this.defaultModel;
    const marked = this.models.find((model) => model.default);
    return marked ? marked.name : this.models[0]?.name || '';
  }

  async selectModel(name) {
    const wanted = name || this.fallbackModel();
    if (wanted) this.ensureModelOption(wanted);
    await this.modelChanged();
  }

  async modelChanged() {
    const name = this.picker.value;
    const request = ++this.detailsRequest;
    delete this.picker.dataset.detailsFor;
    this.onModelChange(name);
    this.adapters.refresh(name); // in parallel with the details; it reports its own errors
    if (!name) {
      this.modelInfo = null;
      this.showThinking(false);
      return;
    }
    let info;
    try {
      info = await apiGet(`/api/models/${encodeURIComponent(name)}`);
    } catch (error) {
      if (request !== this.detailsRequest) return;
      this.modelInfo = null;
      this.showThinking(false);
      this.onError(`Model ${name}: ${error.message}`);
      return;
    }
    if (request !== this.detailsRequest) return; // the user picked another model meanwhile
    this.modelInfo = info;
    this.renderDraftOptions(this.draft.value);
    this.applyDefaults(info.defaults || {}, info.context_length);
    this.showThinking(Boolean(info.supports_thinking));
    this.picker.dataset.detailsFor = name; // the defaults are in: what the user types now stays
  }

  // Quietly refresh the "loaded" marks (a send loads the model) without a change event.
  async refreshModelStates() {
    try {
      this.models = results(await apiGet('/api/models')).filter(chats);
      this.renderModelOptions(this.picker.value);
    } catch {
      // not worth an error banner: the list is only decoration here
    }
  }

  applyDefaults(defaults, contextLength) {
    const starts = { ...defaults };
    if (this.chatMaxTokens) {
      const room = Number.isInteger(contextLength) && contextLength > 0 ? contextLength : Infinity;
      starts.max_tokens = Math.min(this.chatMaxTokens, room);
    }
    this.fields.applyDefaults(defaults, starts, this.fillDefaults);
  }

  showThinking(supported) {
    // Both the field and the checkbox are hidden, so either reads as invisible.
    this.thinkingField.hidden = !supported;
    this.thinking.hidden = !supported;
  }

  // ---- values in and out

  setParams(params, { dirty }) {
    this.fields.set(params, { dirty });
    this.selectDraft(typeof params.draft_model === 'string' ? params.draft_model : '');
  }

  readParams() {
    const params = this.fields.read();
    if (this.draft.value) params.draft_model = this.draft.value;
    return params;
  }

  // The settings part of a websocket request, or null when something is invalid
  // (the problem is then shown next to its field).
  collect() {
    const structured = this.readStructured();
    if (!structured.ok) return null;
    return {
      model: this.picker.value || null,
      adapter: this.adapters.value(), // "none" included: the conversation remembers it
      system_prompt: this.systemPrompt.value,
      params: this.readParams(),
      thinking: this.thinking.hidden ? null : this.thinking.checked,
      structured: structured.value,
    };
  }

  resetForNewChat() {
    this.fillDefaults = true;
    this.systemPrompt.value = '';
    this.setParams({}, { dirty: false });
    this.thinking.checked = true; // templates think by default when they can
    this.setStructured(null);
    this.presets.clear();
    this.adapters.want(NO_ADAPTER);
    return this.selectModel(this.defaultModel);
  }

  // /?model=X&adapter=Y: a new chat on that model (registered or not) and adapter.
  startWith({ model, adapter }) {
    if (adapter) this.adapters.want(adapter);
    if (model) this.ensureModelOption(model);
    return this.modelChanged();
  }

  // A saved conversation keeps thinking, structured and adapter inside its params.
  applyConversation(conversation) {
    this.fillDefaults = false;
    const params = conversation.params && typeof conversation.params === 'object' ? conversation.params : {};
    this.systemPrompt.value = conversation.system_prompt || '';
    this.setParams(params, { dirty: false });
    const thinking = conversation.thinking ?? params.thinking;
    this.thinking.checked = thinking !== false;
    this.setStructured(conversation.structured ?? params.structured ?? null);
    this.presets.clear();
    this.adapters.want(conversation.adapter ?? params.adapter ?? NO_ADAPTER);
    return this.selectModel(conversation.model);
  }

  // ---- structured output

  structuredKindChanged() {
    const kind = this.structuredKind.value;
    this.structuredValue.placeholder = STRUCTURED_HINTS[kind] || '';
    // Dimmed, not disabled, for "none": a value may be typed before the kind is picked.
    this.structuredValue.closest('.field')?.classList.toggle('inactive', kind === 'none');
    this.showStructuredError('');
  }

  setStructured(structured) {
    const kind = structured && structured.kind;
    let text = '';
    if (kind === 'json_schema') text = JSON.stringify(structured.schema ?? {}, null, 2);
    else if (kind === 'regex') text = structured.pattern || '';
    else if (kind === 'choice') text = (structured.choices || []).join('\n');
    this.structuredKind.value = STRUCTURED_HINTS[kind] ? kind : 'none';
    this.structuredValue.value = text;
    this.structuredKindChanged();
  }

  showStructuredError(message) {
    this.structuredError.textContent = message;
    this.structuredError.hidden = !message;
    this.structuredValue.setAttribute('aria-invalid', message ? 'true' : 'false');
  }

  // -> {ok: true, value: null | {...}} or {ok: false} with the error shown inline.
  readStructured({ quietWhenEmpty = false } = {}) {
    const kind = this.structuredKind.value;
    const text = this.structuredValue.value;
    const fail = (message) => {
      this.showStructuredError(quietWhenEmpty && !text.trim() ? '' : message);
      return { ok: false };
    };
    this.showStructuredError('');
    if (kind === 'json_schema') {
      let schema;
      try {
        schema = JSON.parse(text);
      } catch (error) {
        return fail(`Invalid JSON schema: ${error.message}`);
      }
      if (!schema || typeof schema !== 'object' || Array.isArray(schema)) {
        return fail('Invalid JSON schema: it must be a JSON object.');
      }
      return { ok: true, value: { kind, schema } };
    }
    if (kind === 'regex') {
      return text ? { ok: true, value: { kind, pattern: text } } : fail('Enter a regular expression.');
    }
    if (kind === 'choice') {
      const choices = text.split('\n').map((line) => line.trim()).filter(Boolean);
      return choices.length ? { ok: true, value: { kind, choices } } : fail('Enter at least one choice, one per line.');
    }
    return { ok: true, value: null };
  }

  focusStructured() {
    this.structuredValue.focus();
  }
}
