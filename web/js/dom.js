// web/js/dom.js - building the page from data. Every value goes in as a text node or a property,
// never as HTML: a job named <img src=x onerror=alert(1)> shows those characters.

export function h(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k === 'value' || k === 'checked' || k === 'selected' || k === 'disabled') e[k] = v;
    else e.setAttribute(k, String(v));
  }
  add(e, kids);
  return e;
}

export function add(e, kids) {
  for (const k of [kids].flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

export function clear(e) {
  while (e.firstChild) e.removeChild(e.firstChild);
  return e;
}

// int64 fields arrive as strings (proto3 JSON)
export const num = (x) => (x === undefined || x === null || x === '' ? 0 : Number(x));

const pad = (n) => String(n).padStart(2, '0');
export function fmtTime(ms) {
  ms = num(ms);
  if (!ms) return '';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtDuration(ms) {
  let s = Math.max(0, Math.round(num(ms) / 1000));
  if (s < 60) return `${s}s`;
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), mm = Math.floor((s % 3600) / 60);
  s %= 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${pad(mm)}m`;
  return `${mm}m ${pad(s)}s`;
}

export function fmtBytes(n) {
  n = num(n);
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${u[i]}`;
}

export function fmtValue(v) {
  if (v === 'NaN' || Number.isNaN(v)) return 'NaN';
  const x = Number(v);
  if (!Number.isFinite(x)) return String(v);
  return Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : String(+x.toPrecision(5));
}

export const FINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
export const CLASSES = ['NORMAL', 'HIGH', 'URGENT'];
export const className = (p) => (p && p !== 'PRIORITY_UNSPECIFIED' ? p : 'NORMAL').toLowerCase();
// a job's GPUs: "2", or for a gang ranks x GPUs each: "4x2"
export const gpusOf = (s) => (s.replicas > 1 ? `${s.replicas}x${s.gpus || 0}` : String(s.gpus || 0));

export function badge(state) {
  return h('span', { class: `badge st-${String(state).toLowerCase()}` }, String(state).toLowerCase());
}

export function jobLink(id, text) {
  return h('a', { href: `#/job/${num(id)}` }, text === undefined ? `#${num(id)}` : text);
}

// A table of rows: cols are [title, row => cell content, optional class].
export function table(cols, rows, empty) {
  const t = h('table', { class: 'grid' },
    h('thead', null, h('tr', null, cols.map(([title, , cls]) => h('th', { class: cls }, title)))));
  const body = h('tbody');
  for (const r of rows) body.append(h('tr', null, cols.map(([, get, cls]) => h('td', { class: cls }, get(r)))));
  if (!rows.length && empty) body.append(h('tr', null, h('td', { class: 'muted', colspan: cols.length }, empty)));
  t.append(body);
  return t;
}

export function section(title, ...kids) {
  return h('section', { class: 'card' }, h('h2', null, title), ...kids);
}

export function errorBox(err) {
  return h('p', { class: 'error', role: 'alert' }, String(err && err.message ? err.message : err));
}

// Ask before an action; the answer is the dialog's (a real <dialog>, testable, no window.confirm).
export function confirmAction(question) {
  return new Promise((resolve) => {
    const yes = h('button', { type: 'button', class: 'danger', id: 'confirm-yes' }, 'Yes');
    const no = h('button', { type: 'button', id: 'confirm-no' }, 'No');
    const d = h('dialog', { class: 'confirm' }, h('p', null, question), h('div', { class: 'row' }, yes, no));
    const done = (v) => { d.close(); d.remove(); resolve(v); };
    yes.addEventListener('click', () => done(true));
    no.addEventListener('click', () => done(false));
    d.addEventListener('cancel', () => done(false));
    document.body.append(d);
    d.showModal();
  });
}
