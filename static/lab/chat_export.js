// The chat toolbar's Export menu (#export-menu): the open conversation as a Markdown file
// or as JSON in OpenAI's chat shape, downloaded from GET /api/conversations/{id}/export.

export class ExportMenu {
  constructor() {
    this.menu = document.getElementById('export-menu');
    this.links = {
      markdown: document.getElementById('export-markdown'),
      json: document.getElementById('export-json'),
    };
    // A choice made: fold the menu away again.
    this.menu.addEventListener('click', (event) => {
      if (event.target.closest('a')) this.menu.open = false;
    });
  }

  // Shown only for a saved conversation (null: a new chat, nothing to export yet).
  show(conversationId) {
    const saved = conversationId !== null && conversationId !== undefined;
    this.menu.hidden = !saved;
    if (!saved) {
      this.menu.open = false;
      return;
    }
    const base = `/api/conversations/${encodeURIComponent(conversationId)}/export`;
    for (const [kind, link] of Object.entries(this.links)) link.href = `${base}?as=${kind}`;
  }
}
