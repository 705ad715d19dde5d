// The chat page: wires the conversation list, the settings panel and the websocket to
// the message column. See docs/LAB_UI.md for the protocol.

import { apiGet } from './api.js';
import { MessageActions } from './chat_actions.js';
import { SettingsPanel } from './chat_panel.js';
import { ExportMenu } from './chat_export.js';
import { composerAttachments } from './chat_attachments.js';
import { chatPanelToggles, setPageTitle, setUrl, wireComposer } from './chat_layout.js';
import { MessageColumn, StreamingBubble, cancelEdit, createMessage } from './chat_render.js';
import { ConversationList } from './chat_sidebar.js';
import { ChatSocket } from './chat_socket.js';
import { dropWaiting, showWaiting, undoEdit } from './chat_waiting.js';
import { hideBanner, readJsonScript, showBanner, wireBannerClose } from './util.js';

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
  request: null, // the reply in flight: {view, conversationId, pendingText, pendingFiles, pendingNode, editing}
  bubble: null, // its StreamingBubble, while it is shown
  interrupted: false, // the socket dropped mid-reply: reload once it is back
};

const showError = (message) => showBanner(dom.error, message);
const clearError = () => hideBanner(dom.error);

const column = new MessageColumn($('messages'), $('chat-empty'));

const panel = new SettingsPanel({
  defaultModel: readJsonScript('default-model', ''),
  chatMaxTokens: readJsonScript('chat-max-tokens', null),
  onError: showError,
  onModelChange: (name) => attachments.setModel(name, panel.capabilities(name)),
});

const attachments = composerAttachments({ form: dom.form, composer: dom.composer, onError: showError });

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

const { sidebarToggle, settingsToggle } = chatPanelToggles(dom.layout);

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

const setTitle = (title) => setPageTitle(dom.title, title);

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

// Sends one websocket request with the panel's settings; false if it could not go out.
function startRequest(payload, { pendingText = null, pendingFiles = [], editing = null, supersede = null } = {}) {
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
  const conversationId = payload.conversation ?? null;
  state.request = { view: state.view, conversationId, pendingText, pendingFiles, editing };
  setGenerating(true);
  const model = settings.model || panel.fallbackModel() || 'the model';
  const loading = !panel.isLoaded(model);
  const shown = showWaiting(column, { model, loading, pendingText, pendingFiles, supersede });
  state.bubble = shown.bubble;
  state.request.pendingNode = shown.pendingNode;
  return true;
}

function sendComposer() {
  const text = dom.composer.value;
  if ((!text.trim() && !attachments.count) || state.generating) return;
  const files = attachments.take();
  const payload = { type: 'send', conversation: state.conversationId, content: text };
  if (files.length) payload.attachments = files.map((file) => file.url);
  if (!startRequest(payload, { pendingText: text, pendingFiles: files })) {
    attachments.restore(files);
  } else {
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
  // Shown at once; the server's user_message (the new version) takes its place, or `error`
  // puts the old text back. Pending, it stays while `truncated` clears the old branch.
  if (startRequest(payload, { editing: node, supersede: node.nextElementSibling })) {
    cancelEdit(node, text);
    node.classList.add('pending');
  }
}

function stopGenerating() {
  if (socket.hasQueued()) {
    // Never reached the server: take the request back.
    socket.clearQueue();
    giveBack(state.request);
    dropWaiting(column, state.bubble, state.request?.pendingNode);
    finishRequest();
    return;
  }
  socket.send({ type: 'stop' }); // the server answers with `done` (finish_reason cancelled)
}

// A refused or taken-back request: its text and attachments go back to the composer
// rather than be lost, and an edited message back to its saved text.
function giveBack(request) {
  const files = request?.pendingFiles || [];
  if (request?.pendingText && !dom.composer.value) dom.composer.value = request.pendingText;
  if (files.length && !attachments.count) attachments.restore(files);
  undoEdit(request?.editing);
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
    const pending = state.request?.pendingNode || state.request?.editing;
    const sent = { pendingText: null, pendingFiles: [], pendingNode: null, editing: null };
    if (state.request) Object.assign(state.request, sent);
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
    if (viewingRequest()) dropWaiting(column, state.bubble, request?.pendingNode);
    else state.bubble?.begin();
    giveBack(request);
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

// ---- message actions (chat_actions.js)

new MessageActions($('messages'), {
  conversationId: () => state.conversationId,
  generating: () => state.generating,
  column,
  showError,
  regenerate,
  saveEdit,
  opened: (conversation) => column.show(conversation.messages || []),
  openBranch: async (branch) => {
    sidebar.upsert(branch);
    await openConversation(branch.id);
  },
});

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
