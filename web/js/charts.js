// web/js/charts.js - curves with uPlot (from the npm registry, compiled into kestreld): a job's
// metrics against step or time, several jobs' overlaid, GPU utilisation and memory.
import { h, num } from './dom.js';

export const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
  '#bcbd22', '#17becf'];

const value = (v) => (v === 'NaN' || v === null || v === undefined ? null : Number(v));

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

// Every metric of a job, one chart a name, kept up to date by update(metrics).
export class MetricCharts {
  constructor(el) {
    this.el = el;
    this.charts = new Map();
    this.x = 'step';
    this.last = [];
  }

  setX(x) {
    this.x = x;
    for (const c of this.charts.values()) c.u.destroy();
    this.charts.clear();
    this.el.replaceChildren();
    this.update(this.last);
  }

  update(metrics) {
    this.last = metrics;
    const names = byName(metrics);
    if (!names.size && !this.el.firstChild) this.el.append(h('p', { class: 'muted' }, 'No metrics reported yet.'));
    for (const [name, s] of names) {
      const xs = this.x === 'time' ? s.time : s.step;
      let c = this.charts.get(name);
      if (!c) {
        if (this.el.firstChild && this.el.firstChild.tagName === 'P') this.el.replaceChildren();
        const box = h('div', { class: 'chart', dataset: { metric: name } });
        this.el.append(box);
        c = { u: lineChart(box, { title: name, series: [{ label: name }], data: [xs, s.value], time: this.x === 'time' }),
          n: -1 };
        this.charts.set(name, c);
      }
      if (c.n !== xs.length) {
        c.u.setData([xs, s.value]);
        c.n = xs.length;
      }
      c.u.root.closest('.chart').dataset.points = String(xs.length);
    }
  }
}
