// web/js/compare.js - 2 to 10 jobs side by side: one metric of each overlaid on one chart, their
// params and final metrics in one table.
import { get } from './api.js';
import { badge, errorBox, fmtValue, h, jobLink, num, section, table } from './dom.js';
import { byName, lineChart, PALETTE } from './charts.js';

export async function comparePage(view, { params, life }) {
  const ids = [...new Set((params.get('ids') || '').split(',').map(Number).filter((x) => Number.isInteger(x) && x > 0))];
  const pick = h('input', { id: 'compare-ids', value: ids.join(','), placeholder: 'job ids: 3,4,7', size: 30 });
  const go = h('button', { type: 'button' }, 'Compare');
  go.addEventListener('click', () => { location.hash = `#/compare?ids=${pick.value.replace(/\s+/g, '')}`; });
  view.append(h('h1', null, 'Compare'), h('div', { class: 'row' }, pick, go));
  if (ids.length < 2 || ids.length > 10) {
    view.append(h('p', { class: 'muted' }, 'Pick 2 to 10 jobs (here, or with the boxes on the Jobs page).'));
    return;
  }
  const jobs = await Promise.all(ids.map((id) => get(`/api/v1/jobs/${id}`)));
  const series = await Promise.all(ids.map(async (id) => byName((await get(`/api/v1/jobs/${id}/metrics`, { max_points: 2000 })).metrics)));
  const names = [...new Set(series.flatMap((s) => [...s.keys()]))].sort();
  const want = params.get('metric') && names.includes(params.get('metric')) ? params.get('metric')
    : names.includes('loss') ? 'loss' : names[0];
  const sel = h('select', { id: 'compare-metric' }, names.map((n) => h('option', { value: n, selected: n === want }, n)));
  sel.addEventListener('change', () => { location.hash = `#/compare?ids=${ids.join(',')}&metric=${encodeURIComponent(sel.value)}`; });
  const chart = h('div', { class: 'chart', id: 'compare-chart' });
  view.append(section('Metric', h('div', { class: 'row' }, sel), chart));
  if (want) {
    // one x column for all: uPlot.join aligns the jobs' steps, gaps where a job has no point
    const tables = series.map((s) => { const m = s.get(want); return m ? [m.step, m.value] : [[], []]; });
    const data = window.uPlot.join(tables);
    lineChart(chart, { title: want, data, height: 300,
      series: jobs.map((j, i) => ({ label: `#${num(j.id)} ${j.spec.name || ''}`, color: PALETTE[i % PALETTE.length] })) });
    chart.dataset.series = String(jobs.length);
  } else {
    chart.append(h('p', { class: 'muted' }, 'These jobs reported no metrics.'));
  }
  const keys = [...new Set(jobs.flatMap((j) => (j.spec.params || []).map((p) => p.key)))].sort();
  const param = (j, k) => ((j.spec.params || []).find((p) => p.key === k) || {}).value;
  const last = (i, n) => { const m = series[i].get(n); return m && m.value.length ? fmtValue(m.value[m.value.length - 1]) : ''; };
  const rows = [
    { label: 'name', cell: (j) => j.spec.name },
    { label: 'state', cell: (j) => badge(j.state) },
    ...keys.map((k) => ({ label: `param ${k}`, cell: (j) => param(j, k), diff: true, k })),
    ...names.map((n) => ({ label: `last ${n}`, cell: (j, i) => last(i, n) })),
  ];
  const cols = [['', (r) => r.label, 'key'],
    ...jobs.map((j, i) => [jobLink(j.id), (r) => r.cell(j, i)])];
  const t = table(cols, rows);
  rows.forEach((r, i) => {   // params that differ between the jobs stand out
    if (r.diff && new Set(jobs.map((j) => param(j, r.k))).size > 1) t.tBodies[0].rows[i].classList.add('differs');
  });
  view.append(section('Params and final metrics', t));
  void life;
}
