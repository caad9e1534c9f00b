// web/js/charts.js - curves with uPlot (from the npm registry, compiled into kestreld): a job's
// metrics against step or time, several jobs' overlaid, GPU utilisation and memory.
import { h, num } from './dom.js';

export const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
  '#bcbd22', '#17becf'];

// NaN and +-Infinity are gaps: one of them must not take the whole curve (and its axis) away
const value = (v) => { const x = Number(v); return v === null || v === undefined || !Number.isFinite(x) ? null : x; };

// One chart: data is [xs, ys1, ys2...] (uPlot's columns, xs ascending).
export function lineChart(el, { title, series, data, time = false, yLabel = '', height = 220 }) {
  const width = Math.max(320, el.clientWidth || 640);
  const opts = {
    title, width, height,
    scales: { x: { time } },
    series: [{ label: time ? 'time' : 'step' },
      ...series.map((s, i) => ({ label: s.label, stroke: s.color || PALETTE[i % PALETTE.length], width: 1.5,
        points: { show: false }, spanGaps: false }))],
    axes: [{}, { label: yLabel, size: 60 }],
    cursor: { drag: { x: true, y: false } },
  };
  return new window.uPlot(opts, data, el);
}

// A job's metrics by name: { name: { step: [], time: [], value: [] } }, in step order.
export function byName(metrics) {
  const out = new Map();
  for (const m of metrics || []) {
    let s = out.get(m.name);
    if (!s) out.set(m.name, (s = { step: [], time: [], value: [] }));
    s.step.push(num(m.step));
    s.time.push(num(m.wall_time_ms) / 1000);
    s.value.push(value(m.value));
  }
  for (const s of out.values()) {   // uPlot wants x ascending: re-sort when steps came out of order
    let sorted = true;
    for (let i = 1; i < s.step.length && sorted; i++) sorted = s.step[i - 1] <= s.step[i];
    if (!sorted) {
      const idx = s.step.map((_, i) => i).sort((a, b) => s.step[a] - s.step[b]);
      for (const k of ['step', 'time', 'value']) s[k] = idx.map((i) => s[k][i]);
    }
  }
  return out;
}

// Every metric of a job, one chart a name, kept up to date by update(metrics, series). A series
// longer than the sample kestreld sends (GET .../metrics?max_points=N) says so under its chart,
// with a button that draws every point of it (fetchAll(name) gives them).
export class MetricCharts {
  constructor(el, fetchAll) {
    this.el = el;
    this.fetchAll = fetchAll;
    this.charts = new Map();
    this.full = new Map();   // name -> every point, once asked for
    this.x = 'step';
    this.last = [];
    this.series = [];
  }

  setX(x) {
    this.x = x;
    for (const c of this.charts.values()) c.u.destroy();
    this.charts.clear();
    this.el.replaceChildren();
    this.update(this.last, this.series);
  }

  async drawAll(name) {
    const info = this.series.find((x) => x.name === name);
    this.full.set(name, { s: byName(await this.fetchAll(name)).get(name), at: info ? Number(info.points) : 0 });
    this.update(this.last, this.series);
  }

  update(metrics, series) {
    this.last = metrics;
    this.series = series || [];
    const names = byName(metrics);
    for (const [n, f] of this.full) {   // every point, until the series grows past them (a running job)
      const info = this.series.find((x) => x.name === n);
      if (info && Number(info.points) > f.at) this.full.delete(n);
      else if (f.s) names.set(n, f.s);
    }
    if (!names.size && !this.el.firstChild) this.el.append(h('p', { class: 'muted' }, 'No metrics reported yet.'));
    for (const [name, s] of names) {
      const xs = this.x === 'time' ? s.time : s.step;
      let c = this.charts.get(name);
      if (!c) {
        if (this.el.firstChild && this.el.firstChild.tagName === 'P') this.el.replaceChildren();
        const box = h('div', { class: 'chart', dataset: { metric: name } });
        const plot = h('div');
        const note = h('p', { class: 'muted note' });
        box.append(plot, note);
        this.el.append(box);
        c = { u: lineChart(plot, { title: name, series: [{ label: name }], data: [xs, s.value], time: this.x === 'time' }),
          n: -1, box, note };
        this.charts.set(name, c);
      }
      if (c.n !== xs.length) {
        c.u.setData([xs, s.value]);
        c.n = xs.length;
      }
      c.box.dataset.points = String(xs.length);
      const info = this.series.find((x) => x.name === name);
      const total = info ? Number(info.points) : xs.length;
      if (!this.full.has(name) && total > xs.length) {
        const all = h('button', { type: 'button', class: 'draw-all' }, `draw all ${total.toLocaleString()}`);
        all.addEventListener('click', () => { all.disabled = true; this.drawAll(name); });
        c.note.replaceChildren(`${xs.length.toLocaleString()} of ${total.toLocaleString()} points, spread over the run · `, all);
      } else if (total > xs.length) {   // the API's bound on one read (100,000 points)
        c.note.replaceChildren(`the first ${xs.length.toLocaleString()} of ${total.toLocaleString()} points (the most one read returns)`);
      } else {
        c.note.replaceChildren(`${xs.length.toLocaleString()} points`);
      }
    }
  }
}
