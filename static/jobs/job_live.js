// Live job state for the jobs pages: a websocket sending {"type": "job", "job": {...}},
// reconnected with backoff, and a REST poll that stands in while the socket is down.

const FIRST_DELAY_MS = 500;
const MAX_DELAY_MS = 15000;
// Closing codes after which retrying cannot help: logged out, not staff, no such job.
const REFUSED = new Map([
  [4401, 'You are logged out: reload the page to log in again.'],
  [4403, 'Only staff can watch jobs.'],
  [4404, 'This job no longer exists.'],
]);

export class JobFeed {
  // poll(): a promise of the jobs to show (the page's REST call).
  // onJobs(jobs): a poll's answer, with fresher socket updates already merged in.
  // onJob(job): one socket update. onStatus(status, detail): 'connecting' | 'live' |
  // 'polling' | 'refused'. onError(error): a failed poll. shouldPoll(): false once
  // nothing can change any more (a finished job).
  constructor({ url, poll, pollMs, onJobs, onJob, onStatus, onError, shouldPoll = () => true }) {
    Object.assign(this, { url, poll, pollMs, onJobs, onJob, onStatus, onError, shouldPoll });
    this.socket = null;
    this.delay = FIRST_DELAY_MS;
    this.reconnectTimer = null;
    this.pollTimer = null;
    this.refused = false;
    this.stopped = false;
    this.wasOpen = false;
    this.inFlight = null; // socket updates received while a poll is under way, by id
  }

  start() {
    this.refresh();
    this.connect();
    this.pollTimer = setInterval(() => this.tick(), this.pollMs);
    // Skip the rest of the backoff when the user comes back to the tab.
    window.addEventListener('online', () => this.reconnectNow());
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) this.reconnectNow();
    });
  }

  // No more reconnects or polls (the job has finished, or the server refused us).
  stop() {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    clearInterval(this.pollTimer);
    if (this.socket) this.socket.close();
    this.socket = null;
  }

  isOpen() {
    return Boolean(this.socket) && this.socket.readyState === WebSocket.OPEN;
  }

  // ---- polling

  tick() {
    if (this.stopped || this.refused || this.isOpen() || this.inFlight || !this.shouldPoll()) return;
    this.refresh();
  }

  // One REST read. Socket updates that arrive meanwhile are newer than its answer, so
  // they are put back on top of it instead of being overwritten.
  async refresh() {
    if (this.inFlight) return;
    const fresher = new Map();
    this.inFlight = fresher;
    try {
      const jobs = await this.poll();
      const merged = jobs.map((job) => fresher.get(String(job.id)) || job);
      const known = new Set(merged.map((job) => String(job.id)));
      const added = [...fresher.values()].filter((job) => !known.has(String(job.id)));
      this.onJobs([...added, ...merged]);
    } catch (error) {
      this.onError(error);
    } finally {
      this.inFlight = null;
    }
  }

  // ---- the socket

  connect() {
    if (this.stopped || this.refused) return;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.onStatus('connecting');
    const socket = new WebSocket(this.url);
    this.socket = socket;
    socket.addEventListener('open', () => this.opened(socket));
    socket.addEventListener('message', (event) => this.received(event.data));
    socket.addEventListener('close', (event) => this.closed(socket, event));
  }

  opened(socket) {
    if (socket !== this.socket) return;
    this.delay = FIRST_DELAY_MS;
    this.onStatus('live');
    // Updates sent while we were away are lost: read the whole state once.
    if (this.wasOpen) this.refresh();
    this.wasOpen = true;
  }

  received(raw) {
    let data;
    try {
      data = JSON.parse(raw);
    } catch {
      console.warn('ignored a non-JSON websocket message', raw);
      return;
    }
    if (!data || data.type !== 'job' || !data.job || data.job.id === undefined) return;
    if (this.inFlight) this.inFlight.set(String(data.job.id), data.job);
    this.onJob(data.job);
  }

  closed(socket, event) {
    if (socket !== this.socket) return; // an old socket closing late
    this.socket = null;
    if (this.stopped) return;
    if (REFUSED.has(event.code)) {
      this.refused = true;
      clearInterval(this.pollTimer); // the REST calls would be refused the same way
      this.onStatus('refused', REFUSED.get(event.code));
      return;
    }
    this.onStatus('polling', { retryInMs: this.delay });
    const delay = this.delay;
    this.delay = Math.min(this.delay * 2, MAX_DELAY_MS);
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
    this.tick(); // the first poll at once, not a whole period later
  }

  reconnectNow() {
    if (this.stopped || this.refused || this.socket) return; // open or already connecting
    this.connect();
  }
}
