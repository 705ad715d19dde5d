// Markdown for assistant replies: marked (global `marked`, vendored UMD build) turns the
// text into HTML, DOMPurify (global `DOMPurify`) cleans it, and only then is it decorated
// (copy buttons, safe links) and put in the page. Model output is untrusted input.

import { copyWithFeedback, el } from './util.js';

let parser = null;

// Created lazily so the module works whatever order the vendor scripts finish loading in.
function markdownParser() {
  if (!parser) {
    const { Marked } = window.marked;
    parser = new Marked({ gfm: true, breaks: false, async: false });
  }
  return parser;
}

function sanitize(html) {
  return window.DOMPurify.sanitize(html, {
    RETURN_DOM_FRAGMENT: true,
    // No controls or data-* attributes: the page's own buttons are found by
    // [data-action], and a reply must not be able to pose as one of them.
    FORBID_TAGS: ['style', 'form', 'button', 'textarea', 'select'],
    ALLOW_DATA_ATTR: false,
    // Prefixes ids and names ("user-content-…") so a reply cannot shadow the page's ids.
    SANITIZE_NAMED_PROPS: true,
  });
}

// Links from a model leave the lab in a new tab and cannot reach back via window.opener.
function decorateLinks(root) {
  for (const link of root.querySelectorAll('a[href]')) {
    link.target = '_blank';
    link.rel = 'noopener noreferrer';
  }
}

// Images are not fetched: a reply could point one at any server (a tracking pixel, or
// data smuggled out in the URL), and streaming would refetch it on every repaint.
function replaceImages(root) {
  for (const image of root.querySelectorAll('img')) {
    const label = `[image: ${image.getAttribute('alt') || 'untitled'}]`;
    const src = image.getAttribute('src');
    image.replaceWith(src ? el('a', { href: src, class: 'image-link' }, label) : el('span', {}, label));
  }
}

function codeLanguage(code) {
  const match = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className || '');
  return match ? match[1] : '';
}

function decorateCodeBlocks(root) {
  for (const pre of root.querySelectorAll('pre')) {
    const code = pre.querySelector('code') || pre;
    const copy = el('button', { type: 'button', class: 'code-copy', 'aria-label': 'Copy code' }, 'Copy');
    copy.addEventListener('click', () => copyWithFeedback(copy, code.textContent));
    const header = el('div', { class: 'code-header' }, el('span', { class: 'code-lang' }, codeLanguage(code)), copy);
    const block = el('div', { class: 'code-block' });
    pre.replaceWith(block);
    block.append(header, pre);
  }
}

export function renderMarkdown(target, text) {
  let fragment;
  try {
    fragment = sanitize(markdownParser().parse(text || ''));
  } catch (error) {
    // Never lose the reply because the renderer choked: show it as plain text.
    console.error('markdown rendering failed', error);
    target.textContent = text || '';
    return;
  }
  replaceImages(fragment);
  decorateLinks(fragment);
  decorateCodeBlocks(fragment);
  target.replaceChildren(fragment);
}
