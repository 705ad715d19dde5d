// One column of the side-by-side page: a variant's reply to the prompt, over a chat
// websocket of its own (the chat page's protocol: the column is a conversation), its
// Markdown rendered as the chat renders it (markdown.js, sanitised) as it streams.
//   section.sbs-column[data-variant] > h2, details.reasoning, .sbs-reply.markdown, .sbs-stats, .sbs-vote

import { ChatSocket } from './chat_socket.js';
import { renderMarkdown } from './markdown.js';
import { el } from './util.js';

function statsText(stats) {
  const parts = [];
  if (stats?.ttft_ms != null) parts.push(`first token ${stats.ttft_ms} ms`);
  if (stats?.tokens_per_second != null) parts.push(`${stats.tokens_per_second} tokens/s`);
  if (stats?.finish_reason === 'cancelled') parts.push('stopped');
  else if (stats?.finish_reason && stats.finish_reason !== 'stop') parts.push(`finish: ${stats.finish_reason}`);
  return parts.join(' · ');
}

export class Column {
  // onVote(): this reply is the better one; onFinish(): done, stopped or failed;
  // onError(text): a message for the page's banner.
  constructor(choice, { onVote, onFinish, onError }) {
    this.choice = choice;
    this.onFinish = onFinish;
    this.onError = onError;
    this.conversation = null;
    this.done = false;
    this.text = '';
    this.reasoningText = '';
    this.frame = 0;
    this.reply = el('div', { class: 'sbs-reply markdown', 'aria-live': 'polite' });
    this.reasoning = el('details', { class: 'reasoning', hidden: true }, el('summary', {}, 'Thinking'), el('div', { class: 'reasoning-text' }));
    this.stats = el('p', { class: 'sbs-stats muted small' }, 'Waiting…');
    this.vote = el('button', { type: 'button', class: 'sbs-vote', hidden: true }, 'This one is better');
    this.vote.addEventListener('click', onVote);
    this.node = el(
      'section',
      { class: 'card sbs-column', dataset: { variant: choice.label }, 'aria-busy': 'true' },
      el('h2', {}, choice.label),
      this.reasoning,
      this.reply,
      this.stats,
      this.vote,
    );
    this.socket = new ChatSocket({ onMessage: (data) => this.receive(data), onStatus: (status) => this.status(status) });
  }

  // settings: {system_prompt, params} from the shared sampling fields; run: the key that
  // groups the run's conversations in the chat's sidebar.
  send(prompt, settings, run) {
    this.socket.connect();
    this.socket.send({
      type: 'send',
      content: prompt,
      model: this.choice.model,
      adapter: this.choice.adapter || 'none',
      side_by_side_run: run,
      ...settings,
    });
  }

  stop() {
    if (this.done) return;
    if (this.socket.hasQueued()) {
      this.socket.clearQueue(); // never reached the server: nothing to stop there
      this.stats.textContent = 'Stopped before it started.';
      this.finish();
    } else {
      this.socket.send({ type: 'stop' }); // the server answers `done` with the partial reply
    }
  }

  receive(data) {
    if (data.type === 'conversation') this.conversation = data.conversation.id;
    else if (data.type === 'delta' || data.type === 'reasoning') {
      if (data.type === 'delta') this.text += data.text || '';
      else this.reasoningText += data.text || '';
      this.stats.textContent = statsText(data.stats);
      if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
    } else if (data.type === 'done') {
      this.text = data.message.content || '';
      this.reasoningText = data.message.reasoning || '';
      this.render();
      this.stats.textContent = statsText(data.message.stats);
      this.finish();
    } else if (data.type === 'error') {
      this.onError(`${this.choice.label}: ${data.message}`);
      this.stats.textContent = 'Failed.';
      this.finish();
    }
  }

  status(status) {
    if (this.done || (status !== 'closed' && status !== 'unauthorized')) return;
    this.onError(`${this.choice.label}: the connection to the server was lost.`);
    this.finish();
  }

  // Markdown at most once a frame: deltas come far faster than the page repaints.
  render() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    if (this.reasoningText) {
      this.reasoning.hidden = false;
      this.reasoning.querySelector('.reasoning-text').textContent = this.reasoningText;
    }
    if (this.text) renderMarkdown(this.reply, this.text);
    else if (this.done || !this.reasoningText) this.reply.replaceChildren();
  }

  finish() {
    if (this.done) return;
    this.done = true;
    this.socket.end();
    this.node.removeAttribute('aria-busy');
    if (!this.text && this.conversation) this.reply.replaceChildren(el('span', { class: 'empty-note' }, '(empty reply)'));
    this.onFinish();
  }

  // An earlier round's column: its socket closes for good, whatever it was doing.
  end() {
    this.done = true;
    this.socket.end();
  }
}
