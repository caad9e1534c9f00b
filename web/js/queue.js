// web/js/queue.js - the queue: waiting jobs in scheduling order with why each waits, and what runs
// where. Live (every 2 s).
import { get } from './api.js';
import { className, errorBox, fmtDuration, gpusOf, h, jobLink, num, section, table } from './dom.js';

export async function queuePage(view, { life }) {
  const queued = h('div'), running = h('div'), stamp = h('p', { class: 'muted stamp' });
  view.append(h('h1', null, 'Queue'), stamp, section('Waiting', queued), section('Running', running));
  async function refresh() {
    try {
      const [q, r] = await Promise.all([get('/api/v1/queue'), get('/api/v1/jobs', { state: 'RUNNING', page_size: 1000 })]);
      const now = Date.now();
      queued.replaceChildren(table([
        ['#', (e) => e.position, 'num'],
        ['Job', (e) => jobLink(e.job.id)],
        ['Name', (e) => e.job.spec.name],
        ['User', (e) => e.job.owner],
        ['Class', (e) => className(e.job.spec.priority)],
        ['GPUs', (e) => gpusOf(e.job.spec), 'num'],
        ['Pool', (e) => e.job.spec.pool || 'any'],
        ['Waiting', (e) => fmtDuration(now - num(e.job.submit_time_ms)), 'num'],
        ['Why it waits', (e) => h('span', { class: 'reason' }, e.reason)],
      ], q.entries || [], 'Nothing waits.'));
      running.replaceChildren(table([
        ['Job', (j) => jobLink(j.id)],
        ['Name', (j) => j.spec.name],
        ['User', (j) => j.owner],
        ['Class', (j) => className(j.spec.priority)],
        ['Node', (j) => j.node],
        ['Devices', (j) => (j.devices || []).join(', ')],
        ['Run', (j) => num(j.restart_count) + 1, 'num'],
        ['Elapsed', (j) => fmtDuration(now - num(j.start_time_ms)), 'num'],
      ], r.jobs || [], 'Nothing runs.'));
      stamp.textContent = `updated ${new Date().toLocaleTimeString()} · ${(q.entries || []).length} waiting, ${(r.jobs || []).length} running`;
    } catch (e) {
      stamp.replaceChildren(errorBox(e));
    }
  }
  await refresh();
  life.every(2000, refresh);
}
