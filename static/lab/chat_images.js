// Images on the chat page (docs/LAB_UI.md, "Images"): those attached to the next message
// (the file picker, a paste, a drop on the composer) and those a message carried.
// Attachments are read as data: URLs, the form the API's chat surface takes them in; the
// limits here are the server's (MLXLAB_MAX_IMAGES, MLXLAB_MAX_IMAGE_BYTES, a message's
// MLXLAB_MAX_REQUEST_BYTES), which it checks again.

import { el, readJsonScript } from './util.js';

export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp'];
// Room in a websocket message for the text and the settings beside the images.
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

// A message's images as thumbnails; a saved one opens full size (a pending one's data:
// URL cannot be opened in a tab of its own).
export function imageStrip(images) {
  const items = images.map((image, index) => {
    const thumb = el('img', { src: image.url, alt: `Image ${index + 1}`, class: 'thumb', loading: 'lazy' });
    if (!image.url.startsWith('/')) return el('span', { class: 'message-image' }, thumb);
    const title = 'Open the image full size';
    return el('a', { class: 'message-image', href: image.url, target: '_blank', rel: 'noopener', title }, thumb);
  });
  return el('div', { class: 'message-images' }, items);
}

// Files from a paste or a drop; add() refuses any that is not an image, by name.
function filesOf(dataTransfer) {
  return dataTransfer ? [...dataTransfer.files] : [];
}

// The chat page's tray (templates/lab/chat.html), with the server's limits.
export function composerAttachments({ form, composer, onError }) {
  const $ = (id) => document.getElementById(id);
  const [list, note, button, input] = ['attachments', 'attachment-note', 'attach-button', 'attach-input'].map($);
  const limits = readJsonScript('image-limits', null);
  return new AttachmentTray({ list, note, button, input, form, composer, limits, onError });
}

// The images waiting to go with the next message, shown in the composer.
export class AttachmentTray {
  constructor({ list, button, input, note, form, composer, limits, onError }) {
    Object.assign(this, { list, button, input, note, form, composer, onError });
    this.limits = {
      maxImages: limits?.max_images || 16,
      maxImageBytes: limits?.max_image_bytes || 10 * 1024 * 1024,
      maxMessageBytes: limits?.max_message_bytes || 8 * 1024 * 1024,
    };
    this.items = []; // {name, size, url}
    this.model = '';
    this.vision = null; // whether the model takes images; null: not known yet
    this.wire();
  }

  wire() {
    this.button.addEventListener('click', () => {
      if (this.refused()) return;
      this.input.click();
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

  // The selected model and whether it takes images (null while its details load).
  setModel(name, vision) {
    this.model = name;
    this.vision = vision;
    const refuses = vision === false;
    this.button.setAttribute('aria-disabled', String(refuses));
    this.button.title = refuses ? this.refusal() : 'Attach images (PNG, JPEG, WebP)';
    this.showNote();
  }

  // The server's own words for a model that takes text only.
  refusal() {
    return `model '${this.model}' does not accept image input`;
  }

  refused() {
    if (this.vision !== false) return false;
    this.onError(this.refusal());
    return true;
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
    if (!files.length || this.refused()) return;
    for (const file of files) {
      const problem = this.problemWith(file);
      if (problem) {
        this.onError(problem);
        continue;
      }
      let url;
      try {
        url = await readAsDataUrl(file);
      } catch (error) {
        this.onError(`Could not read ${file.name || 'the image'}: ${error?.message || error}`);
        continue;
      }
      if (this.bytes() + url.length > this.limits.maxMessageBytes - MESSAGE_ROOM) {
        const limit = sizeText(this.limits.maxMessageBytes);
        this.onError(`The images of one message may be at most ${limit} in all, as sent.`);
        break;
      }
      this.items.push({ name: file.name || 'pasted image', size: file.size, url });
    }
    this.render();
  }

  problemWith(file) {
    const name = file.name || 'The pasted file';
    if (!IMAGE_TYPES.includes(file.type)) return `${name} is not a PNG, JPEG or WebP image.`;
    const limit = this.limits.maxImageBytes;
    if (file.size > limit) {
      return `${name} is ${sizeText(file.size)}, more than this server's limit of ${sizeText(limit)} per image.`;
    }
    if (this.items.length >= this.limits.maxImages) {
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
    const thumbs = this.items.map((item, index) =>
      el(
        'li',
        { class: 'attachment', title: `${item.name} (${sizeText(item.size)})` },
        el('img', { src: item.url, alt: item.name, class: 'thumb' }),
        this.removeButton(item, index),
      ),
    );
    this.list.replaceChildren(...thumbs);
    this.list.hidden = !thumbs.length;
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
    const refused = this.vision === false && this.items.length > 0;
    this.note.textContent = refused ? `${this.refusal()}: pick a vision model or remove the images.` : '';
    this.note.hidden = !refused;
  }
}
