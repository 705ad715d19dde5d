// Helpers shared by the lab's pages. Every piece of user or server text goes through
// textContent (via `el`), never innerHTML; Markdown has its own sanitising path.

// el('button', {class: 'x', type: 'button', dataset: {action: 'copy'}}, 'Copy')
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key === 'text') node.textContent = value;
    else if (value === true) node.setAttribute(key, '');
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function debounce(fn, wait) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), wait);
  };
}

// navigator.clipboard only exists in secure contexts; the lab is often opened over
// plain http on a LAN address, so fall back to the old selection trick.
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // permission refused: try the fallback below
    }
  }
  const area = el('textarea', { class: 'clipboard-helper', readonly: true, 'aria-hidden': 'true' });
  area.value = text;
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

// Gives a button brief "Copied" feedback without losing its own label.
export async function copyWithFeedback(button, text) {
  const label = button.dataset.label || button.textContent;
  button.dataset.label = label;
  const ok = await copyText(text);
  button.textContent = ok ? 'Copied' : 'Copy failed';
  setTimeout(() => {
    button.textContent = label;
  }, 1200);
}

export function formatBytes(bytes) {
  if (typeof bytes !== 'number' || !Number.isFinite(bytes)) return '—';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit >= 3 ? 2 : unit === 0 ? 0 : 1;
  return `${value.toFixed(digits)} ${units[unit]}`;
}

export function formatDate(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

// A banner element with a .banner-text span and an optional close button.
export function showBanner(banner, message) {
  const text = banner.querySelector('.banner-text') || banner;
  text.textContent = message;
  banner.hidden = false;
}

export function hideBanner(banner) {
  banner.hidden = true;
}

export function wireBannerClose(banner) {
  const close = banner.querySelector('.banner-close');
  if (close) close.addEventListener('click', () => hideBanner(banner));
}

export function readJsonScript(id, fallback = null) {
  const node = document.getElementById(id);
  if (!node) return fallback;
  try {
    return JSON.parse(node.textContent);
  } catch {
    return fallback;
  }
}

// Names each body cell by its column's header (data-label), for tables shown as one card
// per row on a phone (.card-table in lab.css). Cells spanning columns are left alone.
export function labelCells(table) {
  const names = [...(table.tHead?.rows[0]?.cells || [])].map((cell) => cell.textContent.trim());
  for (const row of table.tBodies[0]?.rows || []) {
    [...row.cells].forEach((cell, index) => {
      if (cell.colSpan === 1 && names[index] && !cell.dataset.label) cell.dataset.label = names[index];
    });
  }
}
