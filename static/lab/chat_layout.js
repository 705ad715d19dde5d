// Layout helpers of the chat page: the collapsible side panels, the composer box, the
// title and the address (/?c=<id>).

export function setPageTitle(titleEl, title) {
  titleEl.textContent = title || 'New chat';
  document.title = `${title || 'New chat'} · MLX Lab`;
}

// mode: 'push' (a new history entry), 'replace', or 'none'.
export function setUrl(id, mode) {
  if (mode === 'none') return;
  const url = id ? `/?c=${id}` : '/';
  if (mode === 'replace') history.replaceState(null, '', url);
  else history.pushState(null, '', url);
}

// A side panel shown or hidden by a class on the layout. On narrow screens the panels
// float over the messages, so they start hidden there and close after use.
export class PanelToggle {
  constructor({ layout, button, closeButton, className, narrowQuery }) {
    this.layout = layout;
    this.button = button;
    this.className = className;
    this.narrow = window.matchMedia(narrowQuery);
    if (this.narrow.matches) layout.classList.add(className);
    this.sync();
    button.addEventListener('click', () => this.toggle());
    if (closeButton) closeButton.addEventListener('click', () => this.hide());
  }

  sync() {
    this.button.setAttribute('aria-expanded', String(!this.layout.classList.contains(this.className)));
  }

  toggle() {
    this.layout.classList.toggle(this.className);
    this.sync();
  }

  hide() {
    this.layout.classList.add(this.className);
    this.sync();
  }

  // After picking something in a floating panel, get it out of the way.
  hideIfFloating() {
    if (this.narrow.matches) this.hide();
  }
}

// The chat page's two side panels: the conversations, floating on a phone, and the
// settings, floating below a wide screen.
export function chatPanelToggles(layout) {
  const $ = (id) => document.getElementById(id);
  const panel = (name, className, narrowQuery) =>
    new PanelToggle({ layout, button: $(`toggle-${name}`), closeButton: $(`close-${name}`), className, narrowQuery });
  return {
    sidebarToggle: panel('sidebar', 'sidebar-hidden', '(max-width: 760px)'),
    settingsToggle: panel('settings', 'settings-hidden', '(max-width: 1100px)'),
  };
}

const MAX_COMPOSER_PX = 240;

// Enter sends, Shift+Enter (or Enter while an IME is composing) types a newline; the box
// grows with its text up to a limit. Returns resize() for when the text is set in code.
export function wireComposer(textarea, onSend) {
  const resize = () => {
    textarea.style.height = 'auto';
    textarea.style.height = `${Math.min(textarea.scrollHeight, MAX_COMPOSER_PX)}px`;
  };
  textarea.addEventListener('keydown', (event) => {
    if (event.key !== 'Enter' || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    onSend();
  });
  textarea.addEventListener('input', resize);
  return resize;
}
