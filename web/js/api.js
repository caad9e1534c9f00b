// web/js/api.js - the JSON API, with the session cookie the browser sends by itself and the CSRF
// token every request that changes something must carry (X-Kestrel-CSRF, from /ui/session).

let csrf = '';
let onUnauthenticated = () => {};

export function setCsrf(token) { csrf = token; }
export function whenUnauthenticated(fn) { onUnauthenticated = fn; }

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  const opts = { method, headers, credentials: 'same-origin' };
  if (method !== 'GET') {
    headers['X-Kestrel-CSRF'] = csrf;
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!r.ok) {
    if (r.status === 401) onUnauthenticated();
    throw new ApiError(r.status, data && data.code, (data && data.message) || `${r.status} ${r.statusText}`);
  }
  return data;
}

export const get = (path, params) => call('GET', path + query(params));
export const post = (path, body) => call('POST', path, body === undefined ? {} : body);
export const put = (path, body) => call('PUT', path, body);
export const del = (path) => call('DELETE', path);
export const enc = encodeURIComponent;
export const modelPath = (name) => name.split('/').map(enc).join('/');
