// The chat page: wires the conversation list, the settings panel and the websocket to
// the message column. See docs/LAB_UI.md for the protocol.

import { apiDelete, apiGet, apiPost } from './api.js';
import { SettingsPanel } from './chat_panel.js';
import { ExportMenu } from './chat_export.js';
import { PanelToggle, wireComposer } from './chat_layout.js';
import { MessageColumn, StreamingBubble, cancelEdit, createMessage, createPendingMessage, messageText, startEdit } from './chat_render.js';
import { ConversationList } from './chat_sidebar.js';
import { ChatSocket } from './chat_socket.js';
import { copyWithFeedback, hideBanner, readJsonScript, showBanner, wireBannerClose } from './util.js';

const $ = (id) => document.getElementById(id);

const dom = {
  layout: $('chat-layout'),
  title: $('chat-title'),
  composer: $('composer'),
  form: $('composer-form'),
  send: $('send-button'),
  stop: $('stop-button'),
  error: $('chat-error'),
  status: $('connection-status'),
};

const state = {
  conversationId: null,
  view: 0, // bumped whenever the column shows another conversation
  generating: false,
  request: null, // the reply in flight: {view, conversationId, pendingText, pendingNode, editing}
  bubble: null, // its StreamingBubble, while it is shown
  interrupted: false, // the socket dropped mid-reply: reload once it is back
};

function showError(message) {
  showBanner(dom.error, message);
}

function clearError() {
  hideBanner(dom.error);
}

const column = new MessageColumn($('messages'), $('chat-empty'));

const panel = new SettingsPanel({
  defaultModel: readJsonScript('default-model', ''),
  chatMaxTokens: readJsonScript('chat-max-tokens', null),
  onError: showError,
});

const exportMenu = new ExportMenu();

const sidebar = new ConversationList({
  onOpen: (id) => {
    sidebarToggle.hideIfFloating();
    openConversation(id);
  },
  onDeleted: (id) => {
    if (id === state.conversationId) newChat({ historyMode: 'replace' });
  },
  onRenamed: (id, title) => {
    if (id === state.conversationId) setTitle(title);
  },
  onError: showError,
});

const socket = new ChatSocket({ onMessage: handleServerMessage, onStatus: socketStatus });

const sidebarToggle = new PanelToggle({
  layout: dom.layout,
  button: $('toggle-sidebar'),
  closeButton: $('close-sidebar'),
  className: 'sidebar-hidden',
  narrowQuery: '(max-width: 760px)',
});

const settingsToggle = new PanelToggle({
  layout: dom.layout,
  button: $('toggle-settings'),
  closeButton: $('close-settings'),
  className: 'settings-hidden',
  narrowQuery: '(max-width: 1100px)',
});

const resizeComposer = wireComposer(dom.composer, () => sendComposer());

// ---- page state

function setGenerating(on) {
  state.generating = on;
  document.body.dataset.generating = on ? 'true' : 'false';
  dom.stop.hidden = !on;
  dom.send.disabled = on;
}

function finishRequest() {
  state.request = null;
  state.bubble = null;
  setGenerating(false);
}

// Events of the reply in flight are drawn only if its conversation is still on screen.
function viewingRequest() {
  return Boolean(state.request) && state.request.view === state.view;
}

function setTitle(title) {
  dom.title.textContent = title || 'New chat';
  document.title = `${title || 'New chat'} · MLX Lab`;
}

function setUrl(id, mode) {
  if (mode === 'none') return;
  const url = id ? `/?c=${id}` : '/';
  if (mode === 'replace') history.replaceState(null, '', url);
  else history.pushState(null, '', url);
}

// ---- conversations

async function openConversation(id, { historyMode = 'push', force = false } = {}) {
  if (id === state.conversationId && !force) return;
  const view = ++state.view;
  state.conversationId = id;
  sidebar.setActive(id);
  exportMenu.show(id);
  column.show('loading');
  setUrl(id, historyMode);
  let conversation;
  try {
    conversation = await apiGet(`/api/conversations/${encodeURIComponent(id)}`);
  } catch (error) {
    if (view !== state.view) return;
    showError(`Could not open the conversation: ${error.message}`);
    newChat({ historyMode: 'replace' });
    return;
  }
  if (view !== state.view) return; // the user moved on while it loaded
  setTitle(conversation.title);
  column.show(conversation.messages || []);
  await panel.applyConversation(conversation);
}

async function newChat({ historyMode = 'push' } = {}) {
  state.view += 1;
  state.conversationId = null;
  sidebar.setActive(null);
  exportMenu.show(null);
  column.show(null);
  setTitle('');
  setUrl(null, historyMode);
  dom.composer.focus();
  await panel.resetForNewChat();
}

// ---- requests

// What the user sees at once, before the server answers: their message (a send), the
// replies it replaces hidden (regenerate, edit), and the reply saying what it waits for.
function showWaiting(model, { pendingText, supersede }) {
  if (supersede) column.supersedeFrom(supersede);
  if (pendingText !== null) {
    state.request.pendingNode = createPendingMessage(pendingText);
    column.place(state.request.pendingNode);
  }
  const name = model || panel.fallbackModel() || 'the model';
  state.bubble = new StreamingBubble(name, () => column.followIfNear(), { loading: !panel.isLoaded(name) });
  column.place(state.bubble.node);
  column.scrollToBottom();
}

// A request that will not be answered: take back what showWaiting put up.
function dropWaiting(request) {
  if (state.bubble) {
    state.bubble.begin(); // stops its clock
    if (state.bubble.isEmpty()) state.bubble.node.remove();
    else state.bubble.fail();
  }
  request?.pendingNode?.remove();
  column.restore();
}

// Sends one websocket request with the panel's settings; false if it could not go out.
function startRequest(payload, { pendingText = null, editing = null, supersede = null } = {}) {
  if (state.generating) {
    showError('A reply is still being generated: stop it first.');
    return false;
  }
  const settings = panel.collect();
  if (!settings) {
    panel.focusStructured(); // its inline error says what is wrong
    return false;
  }
  if (!socket.send({ ...payload, ...settings })) {
    showError('You are logged out: reload the page to log in again.');
    return false;
  }
  clearError();
  state.request = { view: state.view, conversationId: payload.conversation ?? null, pendingText, editing };
  setGenerating(true);
  showWaiting(settings.model, { pendingText, supersede });
  return true;
}

function sendComposer() {
  const text = dom.composer.value;
  if (!text.trim() || state.generating) return;
  const payload = { type: 'send', conversation: state.conversationId, content: text };
  if (startRequest(payload, { pendingText: text })) {
    dom.composer.value = '';
    resizeComposer();
    dom.composer.focus(); // ready for the next message, whatever was clicked to send
  }
}

function regenerate() {
  if (state.conversationId === null) return;
  const saved = $('messages').querySelectorAll('.message[data-id]');
  const last = saved[saved.length - 1];
  const supersede = last?.dataset.role === 'assistant' ? last : null;
  startRequest({ type: 'regenerate', conversation: state.conversationId }, { supersede });
}

function saveEdit(node, text) {
  if (!text.trim()) {
    showError('A message cannot be empty.');
    return;
  }
  const payload = { type: 'edit', conversation: state.conversationId, message: Number(node.dataset.id), content: text };
  // Shown at once; the server's user_message confirms it (or `error` puts the old text back).
  if (startRequest(payload, { editing: node, supersede: node.nextElementSibling })) cancelEdit(node, text);
}

function stopGenerating() {
  if (socket.hasQueued()) {
    // Never reached the server: take the request back.
    socket.clearQueue();
    if (state.request?.pendingText && !dom.composer.value) dom.composer.value = state.request.pendingText;
    if (state.request?.editing?.isConnected) cancelEdit(state.request.editing);
    dropWaiting(state.request);
    finishRequest();
    return;
  }
  socket.send({ type: 'stop' }); // the server answers with `done` (finish_reason cancelled)
}

// ---- server messages

const handlers = {
  conversation({ conversation }) {
    if (state.request) state.request.conversationId = conversation.id;
    sidebar.upsert(conversation);
    if (!viewingRequest()) return;
    state.conversationId = conversation.id;
    sidebar.setActive(conversation.id);
    exportMenu.show(conversation.id);
    setTitle(conversation.title);
    history.replaceState(null, '', `/?c=${conversation.id}`);
  },

  user_message({ message }) {
    const pending = state.request?.pendingNode;
    if (state.request) Object.assign(state.request, { pendingText: null, pendingNode: null, editing: null });
    if (!viewingRequest()) return;
    const replacing = column.find(message.id) || (pending?.isConnected ? pending : null);
    column.place(createMessage(message), replacing);
  },

  truncated({ conversation, after }) {
    if (!viewingRequest() || conversation !== state.conversationId) return;
    column.removeAfter(after);
  },

  start({ model }) {
    if (!viewingRequest()) return;
    if (state.bubble?.node.isConnected) {
      state.bubble.loaded(); // the model is up: now the first token
      return;
    }
    state.bubble = new StreamingBubble(model, () => column.followIfNear());
    column.place(state.bubble.node);
  },

  reasoning({ text, stats }) {
    if (viewingRequest() && state.bubble) state.bubble.addReasoning(text || '', stats);
  },

  delta({ text, stats }) {
    if (viewingRequest() && state.bubble) state.bubble.addText(text || '', stats);
  },

  done({ message }) {
    const request = state.request;
    const bubble = state.bubble;
    // Also drawn when the user left and came back to the same conversation meanwhile.
    const visible =
      viewingRequest() || (request?.conversationId != null && request.conversationId === state.conversationId);
    finishRequest();
    if (visible) {
      if (bubble) bubble.cancelFrame();
      const replacing = bubble && bubble.node.isConnected ? bubble.node : column.find(message.id);
      column.place(createMessage(message), replacing);
    }
    panel.refreshModelStates(); // generating loaded the model
  },

  error({ message }) {
    showError(message || 'The request failed.');
    const request = state.request;
    if (viewingRequest()) dropWaiting(request);
    else state.bubble?.begin();
    // A refused send: give the text back rather than lose it.
    if (request?.pendingText && !dom.composer.value) dom.composer.value = request.pendingText;
    if (request?.editing?.isConnected) cancelEdit(request.editing); // back to the saved text
    finishRequest();
  },
};

function handleServerMessage(data) {
  const handler = handlers[data.type];
  if (handler) handler(data);
}

function socketStatus(status, info) {
  dom.status.dataset.status = status;
  if (status === 'open') {
    dom.status.textContent = 'Connected';
    if (state.interrupted && state.conversationId !== null) {
      // The server kept what was generated before the drop: show the saved version.
      openConversation(state.conversationId, { historyMode: 'none', force: true });
    }
    state.interrupted = false;
  } else if (status === 'connecting') {
    dom.status.textContent = 'Connecting…';
  } else if (status === 'unauthorized') {
    dom.status.textContent = 'Logged out';
    showError('You are logged out: reload the page to log in again.');
    if (state.generating) finishRequest();
  } else {
    dom.status.textContent = `Disconnected: retrying in ${Math.round(info.retryInMs / 1000)} s`;
    if (state.generating && !socket.hasQueued()) {
      state.interrupted = true;
      if (state.bubble && viewingRequest()) state.bubble.fail();
      else state.bubble?.begin();
      showError('The connection to the server was lost during the reply.');
      finishRequest();
    }
  }
}

// ---- message actions

async function deleteMessage(node) {
  const id = node.dataset.id;
  if (!id) return;
  const whose = node.dataset.role === 'user' ? 'your message' : 'this reply';
  if (!window.confirm(`Delete ${whose}? This cannot be undone.`)) return;
  try {
    await apiDelete(`/api/messages/${encodeURIComponent(id)}`);
    column.remove(node);
  } catch (error) {
    showError(`Could not delete the message: ${error.message}`);
  }
}

async function branchAt(node) {
  if (!node.dataset.id || state.conversationId === null) return;
  try {
    const body = { message: Number(node.dataset.id) };
    const branch = await apiPost(`/api/conversations/${state.conversationId}/branch`, body);
    sidebar.upsert(branch);
    await openConversation(branch.id);
  } catch (error) {
    showError(`Could not branch: ${error.message}`);
  }
}

function messageAction(event) {
  const button = event.target.closest('button[data-action]');
  const node = button?.closest('.message');
  if (!node) return;
  const action = button.dataset.action;
  if (action === 'copy') copyWithFeedback(button, messageText(node));
  else if (action === 'delete') deleteMessage(node);
  else if (action === 'branch') branchAt(node);
  else if (action === 'regenerate') regenerate();
  else if (action === 'edit') {
    if (state.generating) showError('Wait for the reply to finish (or stop it) before editing.');
    else startEdit(node, (text) => saveEdit(node, text));
  }
}

// Esc stops the reply being generated; otherwise it closes a floating panel.
function pageKey(event) {
  if (event.key !== 'Escape' || event.defaultPrevented || event.target.closest?.('.edit-box')) return;
  if (state.generating) {
    event.preventDefault();
    stopGenerating();
  } else {
    sidebarToggle.hideIfFloating();
    settingsToggle.hideIfFloating();
  }
}

// ---- start

function wirePage() {
  wireBannerClose(dom.error);
  dom.form.addEventListener('submit', (event) => {
    event.preventDefault();
    sendComposer();
  });
  dom.stop.addEventListener('click', stopGenerating);
  $('new-chat').addEventListener('click', () => {
    sidebarToggle.hideIfFloating();
    newChat();
  });
  $('messages').addEventListener('click', messageAction);
  document.addEventListener('keydown', pageKey);
  window.addEventListener('popstate', () => {
    const id = Number(new URLSearchParams(location.search).get('c'));
    if (id) openConversation(id, { historyMode: 'none' });
    else newChat({ historyMode: 'none' });
  });
  // Skip the rest of the reconnect backoff when the user comes back.
  window.addEventListener('online', () => socket.reconnectNow());
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) socket.reconnectNow();
  });
}

async function init() {
  wirePage();
  // Ready to type at once, except where focusing would pop up a touch keyboard.
  if (!window.matchMedia('(pointer: coarse)').matches) dom.composer.focus();
  setGenerating(false); // enables Send, disabled in the template until the form is handled
  socket.connect();
  sidebar.reload();
  await panel.init();
  const query = new URLSearchParams(location.search);
  const id = Number(query.get('c'));
  if (id) {
    await openConversation(id, { historyMode: 'none' });
  } else {
    column.changed();
    // The template's inputs start empty: only fetch the selected model's defaults, so
    // anything chosen or typed while the page was loading stays. /?model=&adapter=
    // (a job's "use" link) picks both.
    await panel.startWith({ model: query.get('model'), adapter: query.get('adapter') });
  }
}

init();
