// The chat page's one websocket (/ws/chat/), reconnected with exponential backoff.

const UNAUTHENTICATED = 4401; // the server closes anonymous sockets with this code
const FIRST_DELAY_MS = 500;
const MAX_DELAY_MS = 15000;

export function chatSocketUrl() {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  return `${scheme}://${location.host}/ws/chat/`;
}

export class ChatSocket {
  // onMessage(data): each JSON message from the server.
  // onStatus(status, info): 'connecting' | 'open' | 'closed' | 'unauthorized'.
  constructor({ url = chatSocketUrl(), onMessage, onStatus }) {
    this.url = url;
    this.onMessage = onMessage;
    this.onStatus = onStatus;
    this.socket = null;
    this.delay = FIRST_DELAY_MS;
    this.timer = null;
    this.unauthorized = false;
    this.outbox = []; // requests made while (re)connecting, sent once the socket opens
  }

  connect() {
    clearTimeout(this.timer);
    this.timer = null;
    this.onStatus('connecting');
    const socket = new WebSocket(this.url);
    this.socket = socket;
    socket.addEventListener('open', () => {
      this.delay = FIRST_DELAY_MS;
      this.flush();
      this.onStatus('open');
    });
    socket.addEventListener('message', (event) => this.dispatch(event.data));
    socket.addEventListener('close', (event) => this.closed(socket, event));
  }

  dispatch(raw) {
    let data;
    try {
      data = JSON.parse(raw);
    } catch {
      console.warn('ignored a non-JSON websocket message', raw);
      return;
    }
    if (data && typeof data.type === 'string') this.onMessage(data);
  }

  closed(socket, event) {
    if (socket !== this.socket || this.ended) return; // an old socket closing late, or ended
    this.socket = null;
    if (event.code === UNAUTHENTICATED) {
      // Retrying cannot help: the session is gone until the user logs in again.
      this.unauthorized = true;
      this.outbox = [];
      this.onStatus('unauthorized', { code: event.code, reason: event.reason });
      return;
    }
    this.onStatus('closed', { code: event.code, reason: event.reason, retryInMs: this.delay });
    this.scheduleReconnect();
  }

  scheduleReconnect() {
    if (this.timer) return;
    const delay = this.delay;
    this.delay = Math.min(this.delay * 2, MAX_DELAY_MS);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  // The user is waiting: skip the rest of the backoff (e.g. when the tab comes back).
  reconnectNow() {
    if (this.unauthorized || this.socket) return; // open or already connecting
    clearTimeout(this.timer);
    this.connect();
  }

  isOpen() {
    return Boolean(this.socket) && this.socket.readyState === WebSocket.OPEN;
  }

  flush() {
    const waiting = this.outbox;
    this.outbox = [];
    for (const message of waiting) this.socket.send(JSON.stringify(message));
  }

  // Sends now, or queues until the socket (re)opens: a request typed right after the page
  // loads must not fail because the handshake is still under way. False once logged out.
  send(message) {
    if (this.unauthorized) return false;
    if (this.isOpen()) this.socket.send(JSON.stringify(message));
    else this.outbox.push(message);
    return true;
  }

  // Closes the socket for good: no reconnecting (a side-by-side column that is done).
  end() {
    this.ended = true;
    clearTimeout(this.timer);
    this.outbox = [];
    this.socket?.close();
    this.socket = null;
  }

  hasQueued() {
    return this.outbox.length > 0;
  }

  clearQueue() {
    this.outbox = [];
  }
}
