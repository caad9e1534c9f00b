// web/js/models.js - the repository: model names, and a model's versions with size, digest,
// aliases, metadata and lineage (the job that pushed it); move an alias where the caller may.
import { get, modelPath, put } from './api.js';
import { confirmAction, errorBox, fmtBytes, fmtTime, h, jobLink, num, section, table } from './dom.js';

export async function modelsPage(view) {
  const res = await get('/api/v1/models');
  const names = res.names || [];
  const filter = h('input', { type: 'search', placeholder: 'filter names', id: 'model-filter' });
  const list = h('ul', { class: 'models', id: 'model-list' });
  const draw = () => list.replaceChildren(...names.filter((n) => n.includes(filter.value))
    .map((n) => h('li', null, h('a', { href: `#/models/${modelPath(n)}` }, n))));
  filter.addEventListener('input', draw);
  draw();
  view.append(h('h1', null, 'Models'), filter, names.length ? list : h('p', { class: 'muted' }, 'No models yet.'));
}

function lineage(meta) {
  const l = meta && meta.lineage;
  if (!l) return '';
  return [l.job_id ? jobLink(l.job_id, `job #${l.job_id}`) : '', l.code ? ` code ${l.code}` : '',
    l.git_commit ? ` git ${String(l.git_commit).slice(0, 10)}` : '',
    l.environment ? ` env ${String(l.environment).slice(0, 19)}` : '',
    (l.data || []).length ? ` data ${(l.data || []).map((d) => d.ref).join(', ')}` : ''];
}

export async function modelPage(view, { arg, session }) {
  const name = arg;
  const res = await get(`/api/v1/models/${modelPath(name)}/versions`);
  const versions = (res.versions || []).slice().sort((a, b) => num(b.version) - num(a.version));
  const rows = versions.map((v) => {
    let meta = null;
    try { meta = v.metadata_json ? JSON.parse(v.metadata_json) : null; } catch (e) { meta = null; }
    const rest = meta ? Object.fromEntries(Object.entries(meta).filter(([k]) => k !== 'lineage')) : {};
    return { v, meta, rest };
  });
  view.append(h('h1', null, 'Model ', h('span', { class: 'name' }, name)), section('Versions', table([
    ['Version', (r) => `@${r.v.version}`, 'num'],
    ['Created', (r) => fmtTime(r.v.created_ms)],
    ['Size', (r) => fmtBytes(r.v.size) + (num(r.v.file_count) ? ` · ${r.v.file_count} files` : ''), 'num'],
    ['Digest', (r) => h('code', { title: r.v.sha256 }, String(r.v.sha256).slice(0, 16))],
    ['Aliases', (r) => (r.v.aliases || []).map((a) => h('span', { class: 'alias' }, a))],
    ['Lineage', (r) => lineage(r.meta)],
    ['Metadata', (r) => (Object.keys(r.rest).length ? h('code', { class: 'meta' }, JSON.stringify(r.rest)) : '')],
  ], rows, 'No versions.')));
  if (session.scope === 'read' || !versions.length) return;
  const alias = h('input', { id: 'alias-name', placeholder: 'production', size: 14 });
  const ver = h('select', { id: 'alias-version' }, versions.map((v) => h('option', { value: v.version }, `@${v.version}`)));
  const move = h('button', { type: 'button', id: 'alias-move' }, 'Point alias');
  const msg = h('span', { class: 'muted', id: 'alias-msg' });
  move.addEventListener('click', async () => {
    const a = alias.value.trim();
    if (!a) { msg.textContent = 'name the alias'; return; }
    if (!(await confirmAction(`Point ${name}@${a} at version ${ver.value}?`))) return;
    try {
      await put(`/api/v1/models/${modelPath(name)}/aliases/${encodeURIComponent(a)}`, { version: ver.value });
      location.reload();
    } catch (e) { msg.replaceChildren(errorBox(e)); }
  });
  view.append(section('Move an alias', h('div', { class: 'row' }, alias, h('span', null, '→'), ver, move, msg)));
}
