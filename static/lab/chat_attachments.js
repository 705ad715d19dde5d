// Images and audio on the chat page (docs/LAB_UI.md, "Images and audio"): those attached to
// the next message (the file picker, a paste, a drop on the composer) and those a message
// carried. Attachments are read as data: URLs, the form the lab's socket takes both in (the
// server makes an audio one OpenAI's input_audio part); the limits here are the server's
// (MLXLAB_MAX_IMAGES, MLXLAB_MAX_IMAGE_BYTES, MLXLAB_MAX_AUDIO_SECONDS, a message's
// MLXLAB_MAX_REQUEST_BYTES), which it checks again.

import { el, readJsonScript } from './util.js';

export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp'];
// The type each audio file is sent as: the server reads wav or mp3 off it, and browsers
// name wav several ways (or not at all, for a file a system does not know).
const AUDIO_TYPES = {
  'audio/wav': 'audio/wav',
  'audio/x-wav': 'audio/wav',
  'audio/wave': 'audio/wav',
  'audio/vnd.wave': 'audio/wav',
  'audio/mpeg': 'audio/mpeg',
  'audio/mp3': 'audio/mpeg',
};
const AUDIO_EXTENSIONS = { wav: 'audio/wav', mp3: 'audio/mpeg' };
const IMAGE_ACCEPT = IMAGE_TYPES.join(',');
const AUDIO_ACCEPT = '.wav,.mp3,audio/wav,audio/mpeg';
// Each kind, the capability a model needs for it (/api/models), and how the picker names it.
const KINDS = {
  image: { capability: 'vision', accept: IMAGE_ACCEPT, label: 'images (PNG, JPEG, WebP)' },
  audio: { capability: 'audio', accept: AUDIO_ACCEPT, label: 'audio (WAV, MP3)' },
};
// Room in a websocket message for the text and the settings beside the attachments.
const MESSAGE_ROOM = 64 * 1024;

function sizeText(bytes) {
  return bytes >= 1024 * 1024 ? `${(bytes / (1024 * 1024)).toFixed(1)} MiB` : `${Math.ceil(bytes / 1024)} KiB`;
}

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// -> {kind, type}: what the file is sent as; null for a file of neither kind.
function kindOf(file) {
  if (IMAGE_TYPES.includes(file.type)) return { kind: 'image', type: file.type };
  const extension = (file.name || '').split('.').pop().toLowerCase();
  const generic = !file.type || file.type === 'application/octet-stream';
  const type = AUDIO_TYPES[file.type] || (generic ? AUDIO_EXTENSIONS[extension] : null);
  return type ? { kind: 'audio', type } : null;
}

// A clip's length in seconds, decoded here as the server will; null where this browser
// cannot decode it (the server then has its say).
async function clipSeconds(file) {
  try {
    const context = new OfflineAudioContext(1, 1, 8000);
    return (await context.decodeAudioData(await file.arrayBuffer())).duration;
  } catch {
    return null;
  }
}

// A message's images as thumbnails, a saved one opening full size (a pending one's data:
// URL cannot be opened in a tab of its own), and its audio as players. A pending clip is
// only named: its player waits for the server's URL, so the policy's media-src stays 'self'.
export function attachmentStrip(attachments) {
  const counts = { image: 0, audio: 0 };
  const items = attachments.map((item) => {
    const number = ++counts[item.kind === 'audio' ? 'audio' : 'image'];
    const saved = item.url.startsWith('/');
    if (item.kind === 'audio') {
      const label = `Audio ${number}`;
      if (!saved) return el('span', { class: 'message-audio pending', title: item.name }, `♪ ${label}`);
      const attrs = { class: 'message-audio', src: item.url, controls: true, preload: 'metadata', 'aria-label': label };
      return el('audio', attrs);
    }
    const thumb = el('img', { src: item.url, alt: `Image ${number}`, class: 'thumb', loading: 'lazy' });
    if (!saved) return el('span', { class: 'message-image' }, thumb);
    const title = 'Open the image full size';
    return el('a', { class: 'message-image', href: item.url, target: '_blank', rel: 'noopener', title }, thumb);
  });
  return el('div', { class: 'message-attachments' }, items);
}

// Files from a paste or a drop; add() refuses any of neither kind, by name.
function filesOf(dataTransfer) {
  return dataTransfer ? [...dataTransfer.files] : [];
}

// The chat page's tray (templates/lab/chat.html), with the server's limits.
export function composerAttachments({ form, composer, onError }) {
  const $ = (id) => document.getElementById(id);
  const [list, note, button, input] = ['attachments', 'attachment-note', 'attach-button', 'attach-input'].map($);
  const limits = readJsonScript('attachment-limits', null);
  return new AttachmentTray({ list, note, button, input, form, composer, limits, onError });
}

// The images and audio waiting to go with the next message, shown in the composer.
export class AttachmentTray {
  constructor({ list, button, input, note, form, composer, limits, onError }) {
    Object.assign(this, { list, button, input, note, form, composer, onError });
    this.limits = {
      maxImages: limits?.max_images || 16,
      maxImageBytes: limits?.max_image_bytes || 10 * 1024 * 1024,
      maxAudioSeconds: limits?.max_audio_seconds || 300,
      maxMessageBytes: limits?.max_message_bytes || 8 * 1024 * 1024,
    };
    this.items = []; // {kind, name, size, url}
    this.model = '';
    this.capabilities = null; // the model's (/api/models); null: not known yet
    this.wire();
  }

  wire() {
    this.button.addEventListener('click', () => {
      if (this.kinds().length) this.input.click();
      else this.onError(this.refusal('image or audio'));
    });
    this.input.addEventListener('change', () => {
      this.add([...this.input.files]);
      this.input.value = ''; // the same file may be picked again after its removal
    });
    this.composer.addEventListener('paste', (event) => this.pasted(event));
    this.form.addEventListener('dragover', (event) => this.dragOver(event));
    this.form.addEventListener('dragleave', () => this.form.classList.remove('dropping'));
    this.form.addEventListener('drop', (event) => this.dropped(event));
  }

  get count() {
    return this.items.length;
  }

  // The selected model and its capabilities (null while its details load).
  setModel(name, capabilities) {
    this.model = name;
    this.capabilities = capabilities;
    const kinds = this.kinds();
    this.button.setAttribute('aria-disabled', String(!kinds.length));
    const takes = kinds.map((kind) => KINDS[kind].label).join(' or ');
    this.button.title = kinds.length ? `Attach ${takes}` : this.refusal('image or audio');
    this.input.accept = (kinds.length ? kinds : Object.keys(KINDS)).map((kind) => KINDS[kind].accept).join(',');
    this.showNote();
  }

  // The kinds the model takes; both while its capabilities are not known.
  kinds() {
    return Object.keys(KINDS).filter((kind) => this.takes(kind));
  }

  takes(kind) {
    return this.capabilities === null || this.capabilities.includes(KINDS[kind].capability);
  }

  // The server's own words for a model that does not take `kind`.
  refusal(kind) {
    return `model '${this.model}' does not accept ${kind} input`;
  }

  pasted(event) {
    const files = filesOf(event.clipboardData);
    if (!files.length) return;
    // Text copied with a picture (a web page's) still pastes as text.
    if (!event.clipboardData.types.includes('text/plain')) event.preventDefault();
    this.add(files);
  }

  dragOver(event) {
    if (!event.dataTransfer?.types.includes('Files')) return;
    event.preventDefault(); // allows the drop
    this.form.classList.add('dropping');
  }

  dropped(event) {
    this.form.classList.remove('dropping');
    const files = filesOf(event.dataTransfer);
    if (!files.length) return;
    event.preventDefault(); // the browser would open the file instead
    this.add(files);
  }

  async add(files) {
    for (const file of files) {
      const found = kindOf(file);
      const problem = await this.problemWith(file, found);
      if (problem) {
        this.onError(problem);
        continue;
      }
      let url;
      try {
        url = await readAsDataUrl(file);
      } catch (error) {
        this.onError(`Could not read ${file.name || 'the file'}: ${error?.message || error}`);
        continue;
      }
      // The type the server goes by, whatever this browser called the file.
      url = `data:${found.type};base64,${url.slice(url.indexOf(',') + 1)}`;
      if (this.bytes() + url.length > this.limits.maxMessageBytes - MESSAGE_ROOM) {
        const limit = sizeText(this.limits.maxMessageBytes);
        this.onError(`The attachments of one message may be at most ${limit} in all, as sent.`);
        break;
      }
      this.items.push({ kind: found.kind, name: file.name || `pasted ${found.kind}`, size: file.size, url });
    }
    this.render();
  }

  async problemWith(file, found) {
    const name = file.name || 'The pasted file';
    if (!found) return `${name} is not a PNG, JPEG or WebP image, nor WAV or MP3 audio.`;
    if (!this.takes(found.kind)) return this.refusal(found.kind);
    if (found.kind === 'audio') {
      const [seconds, limit] = [await clipSeconds(file), this.limits.maxAudioSeconds];
      if (seconds === null || seconds <= limit) return null;
      return `${name} is ${seconds.toFixed(1)} seconds long, more than this server's limit of ${limit} seconds.`;
    }
    const limit = this.limits.maxImageBytes;
    if (file.size > limit) {
      return `${name} is ${sizeText(file.size)}, more than this server's limit of ${sizeText(limit)} per image.`;
    }
    if (this.items.filter((item) => item.kind === 'image').length >= this.limits.maxImages) {
      return `At most ${this.limits.maxImages} images go with a request on this server.`;
    }
    return null;
  }

  bytes() {
    return this.items.reduce((sum, item) => sum + item.url.length, 0);
  }

  // The attachments, handed to a request and cleared; restore() gives them back.
  take() {
    const items = this.items;
    this.items = [];
    this.render();
    return items;
  }

  restore(items) {
    this.items = [...items, ...this.items];
    this.render();
  }

  remove(index) {
    this.items.splice(index, 1);
    this.render();
    this.composer.focus();
  }

  render() {
    const chips = this.items.map((item, index) =>
      el(
        'li',
        { class: `attachment attachment-${item.kind}`, title: `${item.name} (${sizeText(item.size)})` },
        item.kind === 'audio'
          ? el('span', { class: 'audio-chip' }, `♪ ${item.name}`)
          : el('img', { src: item.url, alt: item.name, class: 'thumb' }),
        this.removeButton(item, index),
      ),
    );
    this.list.replaceChildren(...chips);
    this.list.hidden = !chips.length;
    this.showNote();
  }

  removeButton(item, index) {
    const label = `Remove ${item.name}`;
    const button = el('button', { type: 'button', class: 'attachment-remove', 'aria-label': label, title: label }, '×');
    button.addEventListener('click', () => this.remove(index));
    return button;
  }

  // Attached, then another model picked: say so before the server refuses the send.
  showNote() {
    const refused = this.items.find((item) => !this.takes(item.kind));
    const what = refused?.kind === 'audio' ? 'the audio' : 'the images';
    this.note.textContent = refused ? `${this.refusal(refused.kind)}: pick a model that does or remove ${what}.` : '';
    this.note.hidden = !refused;
  }
}
