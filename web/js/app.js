// web/js/app.js - the console's frame: who is logged in, the pages by URL hash, and each page's
// live refresh (stopped when another page opens).
import { get, post, setCsrf, whenUnauthenticated } from './api.js';
import { clear, errorBox, h } from './dom.js';
import { queuePage } from './queue.js';
import { jobsPage } from './jobs.js';
import { jobPage } from './job.js';
import { comparePage } from './compare.js';
import { nodesPage } from './nodes.js';
import { modelsPage, modelPage } from './models.js';

const pages = { queue: queuePage, jobs: jobsPage, job: jobPage, compare: comparePage, nodes: nodesPage,
  models: modelsPage, model: modelPage };
const main = document.getElementById('main');
let session = null;
let stop = [];

// Timers and polls a page starts end when the page is left.
function lifetime() {
  const own = { alive: true, timers: [] };
  stop.push(() => { own.alive = false; own.timers.forEach(clearInterval); });
  return {
    get alive() { return own.alive; },
    every(ms, fn) { own.timers.push(setInterval(() => { if (own.alive && !document.hidden) fn(); }, ms)); },
    onStop(fn) { stop.push(fn); },
  };
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  let page = parts[0] || 'queue';
  let arg = parts.slice(1).join('/');
  if (page === 'models' && arg) page = 'model';
  return { page, arg, params: new URLSearchParams(qs || '') };
}

async function route() {
  if (!session) return;
  stop.forEach((f) => f());
  stop = [];
  const { page, arg, params } = parseHash();
  for (const a of document.querySelectorAll('#nav a'))
    a.classList.toggle('active', a.dataset.page === page || (page === 'job' && a.dataset.page === 'jobs') ||
      (page === 'model' && a.dataset.page === 'models'));
  const render = pages[page];
  clear(main);
  if (!render) {
    main.append(errorBox(`no page '${page}'`));
    return;
  }
  const view = h('div', { class: `page page-${page}` });
  main.append(view);
  try {
    await render(view, { arg, params, session, life: lifetime() });
  } catch (e) {
    view.append(errorBox(e));
  }
}

function showLogin() {
  session = null;
  stop.forEach((f) => f());
  stop = [];
  clear(main);
  document.getElementById('nav').hidden = true;
  document.getElementById('logout').hidden = true;
  document.getElementById('who').textContent = '';
  document.getElementById('login').hidden = false;
  const why = new URLSearchParams(location.search).get('error');
  const msg = document.getElementById('login-error');
  if (why) {
    msg.textContent = why === 'scope' ? 'Job and metrics tokens cannot log in: use your own token.'
      : why === 'site' ? 'A login must come from this console itself, not from another site: open it here.'
        : why === 'code' ? 'That login link was used already or has expired: run kestrel ui again.'
          : 'That token is not valid (mistyped, expired or revoked).';
    msg.hidden = false;
  }
}

async function start() {
  whenUnauthenticated(showLogin);
  try {
    session = await get('/ui/session');
  } catch (e) {
    if (e.status !== 401) main.replaceChildren(errorBox(e));
    return;
  }
  setCsrf(session.csrf_token);
  if (location.search) history.replaceState(null, '', `/${location.hash}`);
  document.getElementById('who').textContent =
    `${session.user}${session.admin ? ' (admin)' : ''}${session.scope === 'read' ? ' · read-only' : ''} · kestreld ${session.version}`;
  const out = document.getElementById('logout');
  out.hidden = false;
  out.addEventListener('click', async () => {
    try { await post('/ui/logout'); } catch (e) { /* the cookie is cleared either way */ }
    location.replace('/');
  });
  window.addEventListener('hashchange', route);
  route();
}

start();
