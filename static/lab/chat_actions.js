// The buttons on the chat page's messages: copy, edit, regenerate, branch, delete and the
// version switcher. The page (chat.js) passes what they act on as callbacks.

import { apiDelete, apiGet, apiPost } from './api.js';
import { messageText, startEdit } from './chat_render.js';
import { switchVersion, versionsOf } from './chat_versions.js';
import { copyWithFeedback } from './util.js';

export class MessageActions {
  // page: {conversationId(), generating(), column, showError(text), regenerate(),
  //        saveEdit(node, text), opened(conversation), openBranch(conversation)}
  constructor(container, page) {
    this.page = page;
    container.addEventListener('click', (event) => this.clicked(event));
  }

  clicked(event) {
    const button = event.target.closest('button[data-action]');
    const node = button?.closest('.message');
    if (!node) return;
    const action = button.dataset.action;
    if (action === 'copy') copyWithFeedback(button, messageText(node));
    else if (action === 'delete') this.remove(node);
    else if (action === 'branch') this.branch(node);
    else if (action === 'regenerate') this.page.regenerate();
    else if (action === 'version-prev') this.switchTo(node, -1);
    else if (action === 'version-next') this.switchTo(node, 1);
    else if (action === 'edit') {
      if (this.page.generating()) this.page.showError('Wait for the reply to finish (or stop it) before editing.');
      else startEdit(node, (text) => this.page.saveEdit(node, text));
    }
  }

  async switchTo(node, step) {
    const id = this.page.conversationId();
    if (id === null) return;
    if (this.page.generating()) {
      this.page.showError('Wait for the reply to finish (or stop it) before switching versions.');
      return;
    }
    let switched;
    try {
      switched = await switchVersion(id, node, step);
    } catch (error) {
      this.page.showError(`Could not switch versions: ${error.message}`);
      return;
    }
    if (!switched || id !== this.page.conversationId()) return; // the user moved on meanwhile
    this.page.opened(switched.conversation);
    // Stay where the user was: on the version now shown, its switcher under the keyboard.
    const shown = this.page.column.find(switched.shown);
    shown?.scrollIntoView({ block: 'nearest' });
    const again = shown?.querySelector(`[data-action=version-${step < 0 ? 'prev' : 'next'}]`);
    (again && !again.disabled ? again : shown?.querySelector('.version-step:not(:disabled)'))?.focus();
  }

  async remove(node) {
    const id = node.dataset.id;
    if (!id) return;
    const versions = versionsOf(node).length;
    const whose = node.dataset.role === 'user' ? 'your message' : 'this reply';
    // One of several versions takes the branch that followed it along.
    const what = versions > 1 ? `this version of ${whose} and what followed it` : whose;
    if (!window.confirm(`Delete ${what}? This cannot be undone.`)) return;
    try {
      await apiDelete(`/api/messages/${encodeURIComponent(id)}`);
    } catch (error) {
      this.page.showError(`Could not delete the message: ${error.message}`);
      return;
    }
    const conversationId = this.page.conversationId();
    if (versions < 2 || conversationId === null) {
      this.page.column.remove(node);
      return;
    }
    // Another version is shown now: ask the server which branch that is.
    try {
      const conversation = await apiGet(`/api/conversations/${encodeURIComponent(conversationId)}`);
      if (conversationId === this.page.conversationId()) this.page.opened(conversation);
    } catch (error) {
      this.page.showError(`Could not reload the conversation: ${error.message}`);
    }
  }

  async branch(node) {
    const id = this.page.conversationId();
    if (!node.dataset.id || id === null) return;
    try {
      const branch = await apiPost(`/api/conversations/${id}/branch`, { message: Number(node.dataset.id) });
      await this.page.openBranch(branch);
    } catch (error) {
      this.page.showError(`Could not branch: ${error.message}`);
    }
  }
}
