// web/js/jobs.js - every job the caller may see, newest first: filters (state, user, label, param,
// name), pages of 50, a key metric column, and a selection to compare.
import { get } from './api.js';
import { badge, className, errorBox, fmtDuration, fmtTime, fmtValue, gpusOf, h, jobLink, num } from './dom.js';

const STATES = ['', 'QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'PREEMPTED'];

export async function jobsPage(view, { params, life }) {
  const f = {
    state: params.get('state') || '', user: params.get('user') || '', label: params.get('label') || '',
    param: params.get('param') || '', name: params.get('name') || '', metric: params.get('metric') || 'loss',
  };
  const input = (key, label, ph) => h('label', null, label,
    h('input', { name: key, value: f[key], placeholder: ph || '', size: 12 }));
  const form = h('form', { class: 'filters', id: 'job-filters' },
    h('label', null, 'State', h('select', { name: 'state' },
      STATES.map((s) => h('option', { value: s, selected: s === f.state }, s ? s.toLowerCase() : 'any')))),
    input('user', 'User'), input('name', 'Name'), input('label', 'Label', 'key=value'),
    input('param', 'Param', 'key=value'), input('metric', 'Key metric'),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    location.hash = `#/jobs?${q}`;
  });
  const selected = new Set();
  const compare = h('button', { type: 'button', id: 'compare-selected', disabled: true }, 'Compare selected');
  compare.addEventListener('click', () => { location.hash = `#/compare?ids=${[...selected].join(',')}`; });
  const body = h('div'), pager = h('div', { class: 'row pager' }), stamp = h('p', { class: 'muted stamp' });
  view.append(h('h1', null, 'Jobs'), form, h('div', { class: 'row' }, compare, stamp), body, pager);

  const tokens = [''];   // page tokens of the pages seen, for "newer"
  let page = 0, next = '';
  async function load() {
    try {
      const t0 = performance.now();
      const res = await get('/api/v1/jobs', { ...f, page_size: 50, page_token: tokens[page] });
      next = res.next_page_token || '';
      render(res.jobs || []);
      stamp.textContent = `${(res.jobs || []).length} jobs on page ${page + 1} · ${Math.round(performance.now() - t0)} ms`;
    } catch (e) {
      body.replaceChildren(errorBox(e));
    }
  }
  function render(jobs) {
    const now = Date.now();
    const rows = jobs.map((j) => {
      const box = h('input', { type: 'checkbox', checked: selected.has(num(j.id)), title: 'compare' });
      box.addEventListener('change', () => {
        if (box.checked) selected.add(num(j.id)); else selected.delete(num(j.id));
        compare.disabled = selected.size < 2 || selected.size > 10;
        compare.textContent = `Compare selected (${selected.size})`;
      });
      const start = num(j.start_time_ms), end = num(j.end_time_ms);
      const km = j.key_metric;
      return h('tr', { dataset: { job: num(j.id) } },
        h('td', null, box), h('td', null, jobLink(j.id)), h('td', null, j.spec.name), h('td', null, j.owner),
        h('td', null, badge(j.state)), h('td', null, className(j.spec.priority)), h('td', { class: 'num' }, gpusOf(j.spec)),
        h('td', null, j.node), h('td', null, fmtTime(start)),
        h('td', { class: 'num' }, start ? fmtDuration((end || now) - start) : ''),
        h('td', { class: 'num', title: km ? `step ${km.step}` : '' }, km ? fmtValue(km.value) : ''));
    });
    const head = ['', 'Job', 'Name', 'User', 'State', 'Class', 'GPUs', 'Node', 'Started', 'Duration', f.metric];
    body.replaceChildren(h('table', { class: 'grid', id: 'jobs-table' },
      h('thead', null, h('tr', null, head.map((t) => h('th', null, t)))),
      h('tbody', null, rows.length ? rows : h('tr', null, h('td', { colspan: head.length, class: 'muted' }, 'No jobs.')))));
    const newer = h('button', { type: 'button', disabled: page === 0 }, '← Newer');
    const older = h('button', { type: 'button', disabled: !next }, 'Older →');
    newer.addEventListener('click', () => { page--; load(); });
    older.addEventListener('click', () => { tokens[page + 1] = next; page++; load(); });
    pager.replaceChildren(newer, older);
  }
  await load();
  life.every(5000, load);
}
