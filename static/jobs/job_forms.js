// The jobs list's "New job" card: one form per kind (#quantize-form, #finetune-form,
// #dataset-form, #evaluate-form), switched by #new-job-kind, sent by #submit-job as
// POST /api/jobs {"kind", "params"}; a refusal's `detail` goes to #job-error.

import { apiGet, apiPost, apiUpload, results } from '../lab/api.js';
import { el, formatDate } from '../lab/util.js';
import { EvaluateVariants, evaluateDataset } from './job_evaluate_form.js';
import { jobUrl, shortId } from './job_format.js';
import { FormProblem, readParams } from './job_params.js';

const $ = (id) => document.getElementById(id);
const FIXED_MODES = new Set(['mxfp4', 'nvfp4', 'mxfp8']); // their bits and group size are set
// What each mlx.optimizers schedule takes, to hint the arguments field.
const SCHEDULE_ARGUMENTS = {
  cosine_decay: 'init, decay_steps[, end]: 1e-5, 1000',
  exponential_decay: 'init, decay_rate: 1e-5, 0.999',
  linear_schedule: 'init, end, steps: 1e-5, 1e-6, 1000',
  step_decay: 'init, decay_rate, step_size: 1e-5, 0.9, 100',
};

// "e.g. qwen3-0_6b-4bit": a hint in the lab's name alphabet, never sent unless typed.
function suggestedName(q) {
  if (!q.model.value) return '';
  const base = q.model.value.toLowerCase().replace(/[^a-z0-9_-]+/g, '-');
  let suffix = `${q.bits.value || 4}bit`;
  if (q.dequantize.checked) suffix = 'f16';
  else if (FIXED_MODES.has(q.mode.value)) suffix = q.mode.value;
  else if (q.recipe.value) suffix = q.recipe.value.replaceAll('_', '-');
  return `e.g. ${base}-${suffix}`;
}

function datasetOption(job) {
  const id = String(job.id);
  const counts = job.result && typeof job.result.counts === 'object' ? job.result.counts : null;
  const sizes = counts ? Object.entries(counts).map(([split, n]) => `${split} ${n}`).join(', ') : '';
  const name = job.params?.name || `dataset ${shortId(id)}`;
  const label = [name, sizes && `(${sizes})`, '·', formatDate(job.finished_at || job.created_at)].filter(Boolean).join(' ');
  return el('option', { value: id }, label);
}

export class NewJobCard {
  constructor() {
    this.kind = $('new-job-kind');
    this.forms = {
      quantize: $('quantize-form'),
      finetune: $('finetune-form'),
      dataset: $('dataset-form'),
      evaluate: $('evaluate-form'),
    };
    this.submitButton = $('submit-job');
    this.submitStatus = $('submit-status');
    this.error = $('job-error');
    this.datasetSelect = $('finetune-dataset');
    this.datasetPath = $('finetune-dataset_path');
    this.source = $('dataset-source');
    this.file = $('dataset-file');
    this.evaluateSource = $('evaluate-dataset');
    this.variants = new EvaluateVariants({ onError: (message) => this.showError(message) });
    this.uploads = new WeakMap(); // File -> upload id: a retry after a refusal re-uses it
    this.busy = false;
    this.wire();
  }

  wire() {
    this.kind.addEventListener('change', () => this.showKind(this.kind.value));
    for (const [kind, form] of Object.entries(this.forms)) {
      // Not form.dataset: a form's named controls shadow its properties (name="dataset").
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        this.submit(kind);
      });
      form.addEventListener('change', () => this.syncControls());
    }
    // The job select and the folder are alternatives: choosing one clears the other.
    this.datasetSelect.addEventListener('change', () => {
      if (this.datasetSelect.value) this.datasetPath.value = '';
    });
    this.datasetPath.addEventListener('input', () => {
      if (this.datasetPath.value.trim()) this.datasetSelect.value = '';
    });
    this.file.addEventListener('change', () => {
      if (this.file.files.length) this.source.value = 'upload';
      this.syncControls();
    });
    this.showKind(this.kind.value);
  }

  async init() {
    await Promise.all([this.loadModels(), this.loadDatasets()]);
    this.syncControls(); // the name hint follows the model picked while the lists loaded
    this.applyQuery(new URLSearchParams(location.search));
  }

  // ---- what the forms show

  showKind(kind) {
    for (const [name, form] of Object.entries(this.forms)) form.hidden = name !== kind;
    // One button for the three forms: it submits the one on show (Enter does too).
    this.submitButton.setAttribute('form', this.forms[kind].id);
    this.showError('');
    this.syncControls();
  }

  // Fields that mean nothing with the current choices are disabled, and so not sent.
  syncControls() {
    const q = this.forms.quantize.elements;
    const dequantize = q.dequantize.checked;
    const fixed = FIXED_MODES.has(q.mode.value);
    q.mode.disabled = dequantize;
    q.recipe.disabled = dequantize || fixed;
    q.group_size.disabled = dequantize || fixed;
    q.bits.disabled = dequantize || fixed || Boolean(q.recipe.value); // a recipe sets each layer's bits
    q.name.placeholder = suggestedName(q) || 'a-z, 0-9, - and _';
    const f = this.forms.finetune.elements;
    const full = f.fine_tune_type.value === 'full';
    $('finetune-lora').disabled = full;
    f.fuse.disabled = full; // a full fine-tune makes a whole model: nothing to fuse
    f.fused_name.disabled = !(full || f.fuse.checked);
    const schedule = f['lr_schedule.name'].value;
    for (const key of ['arguments', 'warmup', 'warmup_init']) f[`lr_schedule.${key}`].disabled = !schedule;
    f['lr_schedule.arguments'].placeholder = SCHEDULE_ARGUMENTS[schedule] || '';
    $('dataset-file-field').hidden = this.source.value !== 'upload';
    $('evaluate-split').disabled = this.evaluateSource.value === 'builtin';
  }

  showError(message) {
    this.error.textContent = message;
    this.error.hidden = !message;
  }

  setBusy(on, text = '') {
    this.busy = on;
    this.submitButton.disabled = on;
    this.submitStatus.textContent = text;
  }

  // ---- choices from the server

  async loadModels() {
    let models = [];
    try {
      models = results(await apiGet('/api/models'));
    } catch (error) {
      this.showError(`Could not list the models: ${error.message}`);
    }
    this.variants.setModels(models);
    for (const select of document.querySelectorAll('select.model-select')) {
      const first = select.dataset.blank || 'Choose a model…';
      const options = models.map((model) => el('option', { value: model.name }, model.quantization ? `${model.name} (${model.quantization})` : model.name));
      const chosen = select.value;
      select.replaceChildren(el('option', { value: '' }, first), ...options);
      select.value = chosen; // a choice made while the list loaded stays
    }
  }

  async loadDatasets() {
    let jobs = [];
    try {
      jobs = results(await apiGet('/api/jobs?kind=dataset&status=succeeded'));
    } catch (error) {
      this.showError(`Could not list the datasets: ${error.message}`);
    }
    const chosen = this.datasetSelect.value;
    const placeholder = el('option', { value: '' }, jobs.length ? 'Choose a dataset job…' : 'No finished dataset jobs yet');
    this.datasetSelect.replaceChildren(placeholder, ...jobs.map(datasetOption));
    this.datasetSelect.value = chosen;
    const source = this.evaluateSource.value;
    this.evaluateSource.replaceChildren(this.evaluateSource.options[0], ...jobs.map(datasetOption));
    this.evaluateSource.value = source || 'builtin';
  }

  hasDataset(id) {
    return [...this.datasetSelect.options].some((option) => option.value === String(id));
  }

  // A dataset job that just succeeded (seen on the live list) can be picked at once.
  addDatasetJob(job) {
    if (job.kind !== 'dataset' || job.status !== 'succeeded' || this.hasDataset(job.id)) return;
    const placeholder = this.datasetSelect.options[0];
    placeholder.textContent = 'Choose a dataset job…';
    placeholder.after(datasetOption(job)); // newest first, as the API lists them
  }

  // /jobs/?finetune_dataset=<id> (the job page's "use" link) opens the fine-tune form on it.
  applyQuery(query) {
    const datasetId = query.get('finetune_dataset');
    if (!datasetId) return;
    this.kind.value = 'finetune';
    this.showKind('finetune');
    if (!this.hasDataset(datasetId)) {
      // Not among the finished ones listed (yet): keep the choice, the server decides.
      this.datasetSelect.append(el('option', { value: datasetId }, `dataset ${shortId(datasetId)}`));
    }
    this.datasetSelect.value = datasetId;
    this.datasetPath.value = '';
    $('new-job').scrollIntoView({ block: 'start' });
    this.forms.finetune.elements.model.focus({ preventScroll: true });
  }

  // ---- sending

  async submit(kind) {
    if (this.busy) return;
    this.showError('');
    this.setBusy(true, 'Starting…');
    try {
      const params = await this.collect(kind); // may upload a file first
      this.submitStatus.textContent = 'Starting…';
      const job = await apiPost('/api/jobs', { kind, params });
      this.submitStatus.textContent = 'Started: opening the job…';
      location.assign(jobUrl(job.id));
    } catch (error) {
      this.showError(error.message || 'The job could not be started.');
      this.setBusy(false);
    }
  }

  async collect(kind) {
    const params = readParams(this.forms[kind]);
    if (kind === 'finetune') {
      const dataset = this.finetuneDataset();
      if (dataset) params.dataset = dataset;
    } else if (kind === 'dataset') {
      params.source = await this.datasetSource();
    } else if (kind === 'evaluate') {
      params.variants = this.variants.collect();
      params.dataset = evaluateDataset();
    }
    return params;
  }

  finetuneDataset() {
    const path = this.datasetPath.value.trim();
    if (path) return { path };
    return this.datasetSelect.value ? { job: this.datasetSelect.value } : null;
  }

  async datasetSource() {
    const source = this.source.value;
    // Everyone's responses is a choice of its own: the job then says it took others' text.
    if (source === 'responses-everyone') return { responses: 'everyone' };
    if (source !== 'upload') return { [source]: 'all' };
    const file = this.file.files[0];
    if (!file) throw new FormProblem('Choose a file to upload, or another source.');
    return { upload: await this.upload(file) };
  }

  async upload(file) {
    const known = this.uploads.get(file);
    if (known) return known;
    this.setBusy(true, `Uploading ${file.name}…`);
    const form = new FormData();
    form.append('file', file, file.name);
    let answer;
    try {
      answer = await apiUpload('/api/datasets/uploads', form);
    } catch (error) {
      throw new FormProblem(`Could not upload ${file.name}: ${error.message}`);
    }
    this.uploads.set(file, answer.id);
    return answer.id;
  }
}
