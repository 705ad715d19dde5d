// The details dialog's "Adapters" row (staff): the adapters mounted on the model's running
// workers, each with Unmount, and the model's registered adapters (GET /api/adapters) to
// mount (POST and DELETE /api/models/<name>/adapters). A mount needs a loaded model.

import { apiDelete, apiGet, apiPost, results } from './api.js';
import { el } from './util.js';

const adaptersUrl = (model, adapter = '') =>
  `/api/models/${encodeURIComponent(model)}/adapters${adapter ? `/${encodeURIComponent(adapter)}` : ''}`;

export class AdapterMounts {
  // dom: {list, select, button, note, error}; the controls stay disabled for non-staff.
  constructor(dom, { isStaff }) {
    this.dom = dom;
    this.isStaff = isStaff;
    this.model = null;
    this.mounted = [];
    dom.button.addEventListener('click', () => this.mount());
    dom.list.addEventListener('click', (event) => {
      const button = event.target.closest('button[data-adapter]');
      if (button) this.unmount(button.dataset.adapter, button);
    });
  }

  async show(info) {
    this.model = info.name;
    this.loaded = Boolean(info.loaded);
    this.say('', '');
    this.render(info.adapters || []);
    await this.fillChoices();
  }

  render(mounted) {
    this.mounted = mounted;
    const items = mounted.map((name) =>
      el(
        'li',
        { dataset: { name } },
        el('span', { class: 'mono' }, name),
        ' ',
        el('button', { type: 'button', class: 'small-button', dataset: { adapter: name }, disabled: !this.isStaff, title: this.isStaff ? null : 'staff only' }, 'Unmount'),
      ),
    );
    this.dom.list.replaceChildren(...(items.length ? items : [el('li', { class: 'muted small' }, 'none mounted')]));
  }

  // The model's registered adapters not mounted yet; only staff may list and mount them.
  async fillChoices() {
    const { select, button } = this.dom;
    const why = !this.isStaff ? 'staff only' : !this.loaded ? 'load the model first' : null;
    let names = [];
    if (this.isStaff) {
      try {
        names = results(await apiGet(`/api/adapters?model=${encodeURIComponent(this.model)}`)).map((a) => a.name);
      } catch (error) {
        this.say('', error.message);
      }
    }
    const choices = names.filter((name) => !this.mounted.includes(name));
    select.replaceChildren(...(choices.length ? choices.map((name) => el('option', { value: name }, name)) : [el('option', { value: '' }, names.length ? '(all mounted)' : '(no adapters of this model)')]));
    const blocked = why || (choices.length ? null : 'nothing to mount');
    for (const control of [select, button]) {
      control.disabled = Boolean(blocked);
      control.title = blocked || '';
    }
  }

  async mount() {
    const adapter = this.dom.select.value;
    if (!adapter) return;
    this.dom.button.disabled = true;
    try {
      const answer = await apiPost(adaptersUrl(this.model), { adapter });
      this.render(answer.mounted);
      this.say(`Mounted ${adapter}: its weights are loaded in the running workers.`, '');
    } catch (error) {
      this.say('', error.message);
    }
    await this.fillChoices();
  }

  async unmount(adapter, button) {
    button.disabled = true;
    try {
      const answer = await apiDelete(adaptersUrl(this.model, adapter));
      this.render(answer.mounted);
      this.say(answer.deferred ? `Unmounted ${adapter}: the requests using it finish first.` : `Unmounted ${adapter}.`, '');
    } catch (error) {
      button.disabled = false;
      this.say('', error.message);
    }
    await this.fillChoices();
  }

  say(note, error) {
    this.dom.note.textContent = note;
    this.dom.error.textContent = error;
    this.dom.error.hidden = !error;
  }
}
