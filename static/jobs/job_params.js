// Reading a new-job form into the `params` of POST /api/jobs. Only what the user filled
// is sent (the server fills in its defaults); numbers go as numbers, checkboxes as
// booleans, and a dotted name ("lora.rank") as a nested object. Inputs marked
// data-manual are read by the form's own code (job_forms.js).

// A problem the user can fix in the form; its message is shown as it is.
export class FormProblem extends Error {}

function labelOf(control) {
  const label = control.labels && control.labels[0];
  return label ? label.textContent.trim() : control.name;
}

function setPath(target, dotted, value) {
  const keys = dotted.split('.');
  let node = target;
  for (const key of keys.slice(0, -1)) {
    if (!node[key] || typeof node[key] !== 'object') node[key] = {};
    node = node[key];
  }
  node[keys[keys.length - 1]] = value;
}

// "1e-5, 1000" -> [0.00001, 1000] (an lr_schedule's arguments).
function numberList(control, text) {
  const numbers = text.split(/[\s,]+/).filter(Boolean).map(Number);
  if (numbers.some((number) => !Number.isFinite(number))) {
    throw new FormProblem(`${labelOf(control)}: enter numbers separated by commas.`);
  }
  return numbers;
}

// The value to send for one control, or undefined to leave it out.
function controlValue(control) {
  if (control.type === 'checkbox') return control.checked;
  if (control.type === 'number') {
    // An unparsable entry reads as "" in a number input: say so rather than drop it.
    if (control.validity.badInput) throw new FormProblem(`${labelOf(control)}: enter a number.`);
    return control.value === '' ? undefined : Number(control.value);
  }
  const text = control.value.trim();
  if (text === '') return undefined;
  if (control.dataset.type === 'number') return Number(text);
  if (control.dataset.type === 'number-list') return numberList(control, text);
  return text;
}

// Disabled controls (also those inside a disabled fieldset) do not apply: left out.
export function readParams(form) {
  const params = {};
  for (const control of form.elements) {
    if (!control.name || control.dataset.manual || control.matches(':disabled')) continue;
    if (control.type === 'submit' || control.type === 'button' || control.type === 'file') continue;
    const value = controlValue(control);
    if (value !== undefined) setPath(params, control.name, value);
  }
  return params;
}
