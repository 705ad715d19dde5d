// A small fetch wrapper for the lab's /api calls: JSON in and out, the CSRF header on
// unsafe methods, and an Error carrying the server's message (`detail`, or `error` of
// an {"ok": false} answer) on 4xx/5xx.

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export class ApiError extends Error {
  constructor(message, status, body) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.body = body;
  }
}

function readCookie(name) {
  for (const part of document.cookie.split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return decodeURIComponent(rest.join('='));
  }
  return '';
}

// The cookie is the source of truth (Django rotates it at login); the hidden form field
// rendered by the logout form is a fallback should the cookie be missing.
export function csrfToken() {
  const fromCookie = readCookie('csrftoken');
  if (fromCookie) return fromCookie;
  const field = document.querySelector('input[name=csrfmiddlewaretoken]');
  return field ? field.value : '';
}

function flatten(value) {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map(flatten).join(' ');
  if (value && typeof value === 'object') {
    return Object.entries(value)
      .map(([key, inner]) => `${key}: ${flatten(inner)}`)
      .join('; ');
  }
  return String(value);
}

// The contract's errors are {"detail": "..."}; the publishing endpoints answer
// {"ok": false, "error": "..."} (perhaps with more fields, e.g. the failed job, which
// are no part of the message). DRF field errors ({"label": ["..."]}) and HTML error
// pages (a crashed view) still deserve a readable message.
function errorMessage(body, response) {
  if (body && typeof body === 'object') {
    if (body.detail !== undefined) return flatten(body.detail);
    if (body.ok === false && body.error !== undefined && body.error !== null) return flatten(body.error);
    const text = flatten(body);
    if (text) return text;
  }
  return `${response.status} ${response.statusText || 'error'}`.trim();
}

async function readBody(response) {
  if (response.status === 204) return null;
  const type = response.headers.get('Content-Type') || '';
  if (type.includes('application/json')) {
    try {
      return await response.json();
    } catch {
      return null;
    }
  }
  return response.text();
}

// `form` (a FormData) is sent as multipart instead of a JSON `body`.
export async function api(path, { method = 'GET', body, form, signal } = {}) {
  const upper = method.toUpperCase();
  const headers = { Accept: 'application/json' };
  const init = { method: upper, headers, credentials: 'same-origin', signal };
  if (form !== undefined) {
    init.body = form; // no Content-Type: the browser writes multipart's with its boundary
  } else if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  if (!SAFE_METHODS.has(upper)) headers['X-CSRFToken'] = csrfToken();

  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    if (error.name === 'AbortError') throw error;
    throw new ApiError('Could not reach the server.', 0, null);
  }
  const data = await readBody(response);
  if (!response.ok) throw new ApiError(errorMessage(data, response), response.status, data);
  // An expired session answers with a redirect to the login page, which fetch follows.
  if (response.redirected && new URL(response.url).pathname.startsWith('/login')) {
    throw new ApiError('Your session has ended: reload the page to log in again.', 401, null);
  }
  return data;
}

export const apiGet = (path, options) => api(path, { ...options, method: 'GET' });
export const apiPost = (path, body, options) => api(path, { ...options, method: 'POST', body });
export const apiPatch = (path, body, options) => api(path, { ...options, method: 'PATCH', body });
export const apiDelete = (path, options) => api(path, { ...options, method: 'DELETE' });
export const apiUpload = (path, form, options) => api(path, { ...options, method: 'POST', form });

// Lists come as {"results": [...]} per the contract; /api/keys answers a bare list.
export function results(data) {
  if (Array.isArray(data)) return data;
  return data && Array.isArray(data.results) ? data.results : [];
}

// Whether a registry entry (/api/models) serves chats: embedding models and rerankers do not.
export function chats(model) {
  return (model.capabilities || ['chat']).includes('chat');
}
