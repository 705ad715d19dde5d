// What the chat page shows for a request before the server answers it: the user's
// message (a send), the messages it replaces hidden (regenerate, edit), and the reply
// saying what it waits for; and how all of that is taken back when the request is refused.

import { StreamingBubble, cancelEdit, createPendingMessage } from './chat_render.js';

// -> {pendingNode, bubble}: the message as sent (or null) and the waiting reply.
export function showWaiting(column, { model, loading, pendingText, pendingFiles, supersede }) {
  if (supersede) column.supersedeFrom(supersede);
  let pendingNode = null;
  if (pendingText !== null) {
    pendingNode = createPendingMessage(pendingText, pendingFiles || []);
    column.place(pendingNode);
  }
  const bubble = new StreamingBubble(model, () => column.followIfNear(), { loading });
  column.place(bubble.node);
  column.scrollToBottom();
  return { pendingNode, bubble };
}

// A request that will not be answered: take back what showWaiting put up.
export function dropWaiting(column, bubble, pendingNode) {
  if (bubble) {
    bubble.begin(); // stops its clock
    if (bubble.isEmpty()) bubble.node.remove();
    else bubble.fail();
  }
  pendingNode?.remove();
  column.restore();
}

// An edited message goes back to its saved text (the edit was refused or taken back).
export function undoEdit(node) {
  if (!node?.isConnected) return;
  node.classList.remove('pending');
  cancelEdit(node);
}
