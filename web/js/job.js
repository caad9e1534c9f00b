// web/js/job.js - one job: what it runs (spec), what happened (events as a timeline), its log,
// its metrics and GPUs as curves, and the model versions it pushed; cancel and change class.
import { get, modelPath, post } from './api.js';
import { badge, CLASSES, className, confirmAction, errorBox, FINAL, fmtBytes, fmtDuration, fmtTime, gpusOf, h, jobLink, num,
  section, table } from './dom.js';
import { lineChart, MetricCharts } from './charts.js';
import { LogView } from './logview.js';

const kv = (list) => (list || []).map((p) => `${p.key}=${p.value}`).join('  ');

function specTable(j) {
  const s = j.spec;
  const rows = [
    ['Command', h('code', null, (s.argv || []).join(' '))],
    ['User', `${j.owner}${j.team ? ` (team ${j.team})` : ''}`],
    ['Class', className(s.priority)], ['GPUs', gpusOf(s)], ['Pool', s.pool || 'any'],
    ['Node', j.node], ['Devices', (j.devices || []).join(', ')],
    ['Code', s.code], ['Git', s.git_url ? `${s.git_url} ${s.git_ref} ${j.git_commit}` : ''],
    ['Environment', s.environment || (s.requirements ? 'built from requirements' : '')],
    ['Environment digest', j.environment],
    ['Requirements', s.requirements ? h('pre', null, s.requirements) : ''],
    ['Data', (s.data || []).map((d) => `${d.ref} → ${d.path}`).join(', ')],
    ['Params', kv(s.params)], ['Labels', kv(s.labels)], ['Env', kv(s.env)], ['Secret env', kv(s.secret_env)],
    ['Work dir', s.workdir], ['Retries', s.max_retries ? `up to ${s.max_retries}` : ''],
    ['After', [...(s.after_ok || []).map((x) => `ok #${x}`), ...(s.after_any || []).map((x) => `any #${x}`)].join(', ')],
    ['Submitted', fmtTime(j.submit_time_ms)], ['Started', fmtTime(j.start_time_ms)], ['Ended', fmtTime(j.end_time_ms)],
    ['Exit code', num(j.exit_code) >= 0 && FINAL.has(j.state) ? j.exit_code : ''],
  ].filter(([, v]) => v !== '' && v !== undefined && v !== null && !(Array.isArray(v) && !v.length));
  return table([['', (r) => r[0], 'key'], ['', (r) => r[1]]], rows);
}

// "preempted by job 7" becomes a link to job 7.
function linked(reason) {
  const out = [];
  const re = /job #?(\d+)/g;
  let at = 0, m;
  while ((m = re.exec(reason)) !== null) {
    out.push(reason.slice(at, m.index), jobLink(m[1], m[0]));
    at = m.index + m[0].length;
  }
  out.push(reason.slice(at));
  return out;
}

function timeline(j) {
  let run = 0;
  const items = (j.events || []).map((e) => {
    // a run starts where the job enters RUNNING; an event within a run (a log policy's
    // running -> running) is not another run
    const starts = e.to_state === 'RUNNING' && e.from_state !== 'RUNNING';
    if (starts) run++;
    return h('li', { class: `ev st-${String(e.to_state).toLowerCase()}` },
      h('span', { class: 'ts' }, fmtTime(e.time_ms)), ' ',
      e.from_state && e.from_state !== 'JOB_STATE_UNSPECIFIED' ? `${e.from_state.toLowerCase()} → ` : '',
      h('b', null, String(e.to_state).toLowerCase()), starts ? ` (run ${run})` : '',
      e.reason ? [' · ', linked(e.reason)] : '');
  });
  return h('ol', { class: 'timeline', id: 'timeline' }, items);
}

function actions(j, session, reload) {
  if (session.scope === 'read' || FINAL.has(j.state)) return h('div');
  const cancel = h('button', { type: 'button', class: 'danger', id: 'cancel-job' }, 'Cancel job');
  const msg = h('span', { class: 'muted' });
  cancel.addEventListener('click', async () => {
    if (!(await confirmAction(`Cancel job #${num(j.id)} (${j.spec.name || 'unnamed'})?`))) return;
    try { await post(`/api/v1/jobs/${num(j.id)}/cancel`); msg.textContent = 'cancelling…'; reload(); } catch (e) { msg.replaceChildren(errorBox(e)); }
  });
  const cls = h('select', { id: 'job-class' }, CLASSES.map((c) => h('option', { value: c, selected: c === (j.spec.priority === 'PRIORITY_UNSPECIFIED' ? 'NORMAL' : j.spec.priority) }, c.toLowerCase())));
  const change = h('button', { type: 'button', id: 'change-class' }, 'Change class');
  change.addEventListener('click', async () => {
    if (!(await confirmAction(`Move job #${num(j.id)} to class ${cls.value.toLowerCase()}?`))) return;
    try { await post(`/api/v1/jobs/${num(j.id)}/priority`, { priority: cls.value }); msg.textContent = 'class changed'; reload(); } catch (e) { msg.replaceChildren(errorBox(e)); }
  });
  // the class of a job that waits (kestreld refuses it once the job runs)
  return h('div', { class: 'row actions' }, cancel, j.state === 'QUEUED' ? [cls, change] : [], msg);
}

function gpuCharts(el, tel) {
  const byDev = new Map();
  for (const s of tel.samples || []) {
    let d = byDev.get(s.uuid);
    if (!d) byDev.set(s.uuid, (d = { t: [], util: [], mem: [] }));
    d.t.push(num(s.time_ms) / 1000);
    d.util.push(Number(s.utilization));
    d.mem.push(num(s.memory_used_bytes) / 2 ** 20);
  }
  el.replaceChildren();
  if (!byDev.size) { el.append(h('p', { class: 'muted' }, 'No GPU samples (no real GPU held, or not sampled yet).')); return; }
  for (const [uuid, d] of byDev) {
    const a = h('div', { class: 'chart' }), b = h('div', { class: 'chart' });
    el.append(h('h3', null, uuid), h('div', { class: 'pair' }, a, b));
    lineChart(a, { title: 'utilisation %', series: [{ label: 'util %' }], data: [d.t, d.util], time: true, height: 160 });
    lineChart(b, { title: 'memory used MiB', series: [{ label: 'MiB' }], data: [d.t, d.mem], time: true, height: 160 });
  }
  const usage = (tel.usage || []).map((u) => `${u.uuid}: mean ${Number(u.mean_utilization).toFixed(0)} %, max ${u.max_utilization} %, peak ${fmtBytes(u.peak_memory_bytes)}`);
  el.append(h('p', { class: 'muted' }, usage.join(' · ')));
}

function modelsTable(list) {
  return table([
    ['Version', (v) => h('a', { href: `#/models/${modelPath(v.name)}` }, `${v.name}@${v.version}`)],
    ['Created', (v) => fmtTime(v.created_ms)], ['Size', (v) => fmtBytes(v.size), 'num'],
    ['Digest', (v) => h('code', null, String(v.sha256).slice(0, 12))], ['Aliases', (v) => (v.aliases || []).join(', ')],
  ], list.versions || [], 'This job pushed no model versions.');
}

export async function jobPage(view, { arg, session, life }) {
  const id = Number(arg);
  if (!Number.isInteger(id) || id < 1) throw new Error(`'${arg}' is not a job id`);
  const head = h('div'), spec = h('div'), events = h('div'), charts = h('div', { id: 'charts' }),
    gpus = h('div', { id: 'gpus' }), models = h('div', { id: 'models' }), logs = h('div');
  const xsel = h('select', { id: 'chart-x' }, h('option', { value: 'step' }, 'against step'),
    h('option', { value: 'time' }, 'against time'));
  view.append(head, h('div', { class: 'cols' }, section('Spec', spec), section('Timeline', events)),
    section('Metrics', h('div', { class: 'row' }, xsel), charts), section('Log', logs), section('GPUs', gpus),
    section('Model versions pushed', models));
  const more = h('p', { class: 'muted', hidden: true }, 'This job reported more than 1,000 metric names: the first 1,000 (by name) are drawn.');
  charts.before(more);
  const mc = new MetricCharts(charts, async (name) => (await get(`/api/v1/jobs/${id}/metrics`, { name })).metrics || []);
  xsel.addEventListener('change', () => mc.setX(xsel.value));
  let job = null;
  async function reload() {
    job = await get(`/api/v1/jobs/${id}`);
    const elapsed = num(job.start_time_ms) ? fmtDuration((num(job.end_time_ms) || Date.now()) - num(job.start_time_ms)) : '';
    const explain = job.state === 'QUEUED' ? await get(`/api/v1/jobs/${id}/explain`).catch(() => null) : null;
    head.replaceChildren(h('h1', null, `Job #${id} `, h('span', { class: 'name' }, job.spec.name || ''), ' ', badge(job.state)),
      h('p', { class: 'muted', id: 'job-summary' }, [job.reason, elapsed && `elapsed ${elapsed}`,
        explain && explain.position ? `position ${explain.position} in the queue: ${explain.reason}` : '']
        .filter(Boolean).join(' · ')),
      actions(job, session, () => reload()));
    spec.replaceChildren(specTable(job));
    events.replaceChildren(timeline(job));
  }
  const metrics = async () => {
    const res = await get(`/api/v1/jobs/${id}/metrics`, { max_points: 2000 });
    mc.update(res.metrics || [], res.series || []);
    more.hidden = !res.more_series;
  };
  const gpu = async () => gpuCharts(gpus, await get(`/api/v1/jobs/${id}/gpu`));
  const pushed = async () => models.replaceChildren(modelsTable(await get(`/api/v1/jobs/${id}/models`)));
  await reload();
  await Promise.all([metrics(), gpu().catch((e) => gpus.replaceChildren(errorBox(e))),
    pushed().catch((e) => models.replaceChildren(errorBox(e)))]);
  new LogView(logs, id, life).run();
  let finalSeen = FINAL.has(job.state);
  life.every(2000, async () => {
    if (finalSeen) return;
    try {
      await reload();
      await metrics();
      if (FINAL.has(job.state)) { finalSeen = true; await Promise.all([gpu(), pushed()]); }
    } catch (e) { /* the next tick tries again */ }
  });
  life.every(10000, () => { if (!finalSeen) gpu().catch(() => {}); });
}
