// Reply versions on the chat page. Regenerate and edit keep what they replace as another
// version of the turn (docs/LAB_UI.md, "Reply versions"); a message whose turn has
// several shows "< 2 / 3 >" in its header:
//   .versions[role=group] > button[data-action=version-prev], .version-label, button[data-action=version-next]
// Switching asks the server to show that version (POST /api/conversations/{id}/show),
// which remembers it and answers with the conversation's new shown branch.

import { apiPost } from './api.js';
import { el } from './util.js';

// The message's own versions, oldest first (its id among them), as the server sent them.
export function versionsOf(node) {
  return (node.dataset.versions || '').split(',').filter(Boolean).map(Number);
}

function stepButton(action, label, title, disabled) {
  return el(
    'button',
    { type: 'button', class: 'msg-action version-step', dataset: { action }, title, 'aria-label': title, disabled },
    label,
  );
}

// The switcher for a saved message, or null when its turn has one version.
export function versionSwitcher(message) {
  const versions = Array.isArray(message.versions) ? message.versions : [];
  if (versions.length < 2) return null;
  const index = versions.indexOf(message.id);
  const label = `${index + 1} / ${versions.length}`;
  return el(
    'span',
    { class: 'versions', role: 'group', 'aria-label': `Version ${label}` },
    stepButton('version-prev', '<', 'Previous version', index <= 0),
    el('span', { class: 'version-label' }, label),
    stepButton('version-next', '>', 'Next version', index >= versions.length - 1),
  );
}

// Shows the version one step (-1 or +1) from the node's; returns the conversation as the
// server now shows it, and the id of the version shown, or null at either end.
export async function switchVersion(conversationId, node, step) {
  const versions = versionsOf(node);
  const target = versions[versions.indexOf(Number(node.dataset.id)) + step];
  if (target === undefined) return null;
  const conversation = await apiPost(`/api/conversations/${encodeURIComponent(conversationId)}/show`, {
    message: target,
  });
  return { conversation, shown: target };
}
