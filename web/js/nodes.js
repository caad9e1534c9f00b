// web/js/nodes.js - the nodes kestreld schedules on: their devices, which job holds each, and live
// utilisation and memory (refreshed every 3 s, with the history since the page opened).
import { get } from './api.js';
import { errorBox, fmtTime, h, jobLink, num, section, table } from './dom.js';
import { lineChart } from './charts.js';

function bar(fraction, label) {
  const fill = h('span', { class: 'fill' });
  fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return h('span', { class: 'bar', title: label }, fill, h('span', { class: 'lbl' }, label));
}

export async function nodesPage(view, { life }) {
  const body = h('div'), stamp = h('p', { class: 'muted stamp' });
  view.append(h('h1', null, 'Nodes'), stamp, body);
  const history = new Map();   // node -> { t: [], per device util [] }
  const charts = new Map();
  async function refresh() {
    let res;
    try { res = await get('/api/v1/nodes'); } catch (e) { stamp.replaceChildren(errorBox(e)); return; }
    const nodes = res.nodes || [];
    const now = Date.now() / 1000;
    const cards = nodes.map((n) => {
      const devs = n.devices || [];
      const held = devs.filter((d) => num(d.job_id)).length;
      let hist = history.get(n.name);
      if (!hist) history.set(n.name, (hist = { t: [], util: devs.map(() => []) }));
      hist.t.push(now);
      devs.forEach((d, i) => (hist.util[i] || (hist.util[i] = [])).push(d.utilization >= 0 ? d.utilization : null));
      if (hist.t.length > 600) { hist.t.shift(); hist.util.forEach((u) => u.shift()); }
      const t = table([
        ['#', (d) => d.index, 'num'],
        ['GPU', (d) => d.name || d.type],
        ['Memory', (d) => (num(d.memory_free_mb) >= 0 && num(d.memory_total_mb)
          ? bar(1 - num(d.memory_free_mb) / num(d.memory_total_mb),
            `${num(d.memory_total_mb) - num(d.memory_free_mb)} / ${num(d.memory_total_mb)} MiB`)
          : `${num(d.memory_total_mb)} MiB`)],
        ['Utilisation', (d) => (d.utilization >= 0 ? bar(d.utilization / 100, `${d.utilization} %`) : 'unknown')],
        ['Held by', (d) => (num(d.job_id) ? jobLink(d.job_id) : h('span', { class: 'muted' }, 'free'))],
        ['UUID', (d) => h('code', null, d.uuid)],
      ], devs, 'No devices.');
      let box = charts.get(n.name);
      if (!box) charts.set(n.name, (box = { el: h('div', { class: 'chart' }), u: null }));
      return section(`${n.name} · pool ${n.pool || 'default'} · ${held} of ${devs.length} devices held`,
        t, h('p', { class: 'muted' }, `read ${fmtTime(n.refreshed_ms)}`), box.el);
    });
    body.replaceChildren(...cards);
    for (const n of nodes) {   // the utilisation since this page opened, one curve a device
      const hist = history.get(n.name), box = charts.get(n.name);
      if (!hist.util.some((u) => u.some((x) => x !== null))) continue;
      const data = [hist.t, ...hist.util];
      if (!box.u) box.u = lineChart(box.el, { title: 'utilisation % (since this page opened)', time: true, height: 160,
        series: hist.util.map((_, i) => ({ label: `GPU ${i}` })), data });
      else box.u.setData(data);
    }
    stamp.textContent = `updated ${new Date().toLocaleTimeString()} · ${nodes.length} nodes`;
  }
  await refresh();
  life.every(3000, refresh);
}
