// web/js/logview.js - a job's log: a live tail (a long poll on /logs?offset=N&wait_ms=), the
// newest 20,000 lines kept, search as you type over them with every match highlighted, and the
// server's full-text search for the whole log.
import { get } from './api.js';
import { errorBox, fmtTime, h } from './dom.js';

const KEEP = 20000;

function highlighted(text, needle) {
  if (!needle) return [text];
  const out = [], low = text.toLowerCase(), n = needle.toLowerCase();
  let at = 0;
  for (let i = low.indexOf(n); i >= 0; i = low.indexOf(n, at)) {
    if (i > at) out.push(text.slice(at, i));
    out.push(h('mark', null, text.slice(i, i + n.length)));
    at = i + n.length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

function lineNode(l, needle) {
  return h('div', { class: `ln s-${String(l.stream).toLowerCase()}`, dataset: { offset: l.offset } },
    h('span', { class: 'ts' }, fmtTime(l.time_ms).slice(11)), ' ', highlighted(l.text, needle));
}

export class LogView {
  constructor(el, jobId, life) {
    this.jobId = jobId;
    this.lines = [];
    this.dropped = false;
    this.offset = 0;
    this.needle = '';
    this.follow = true;
    this.search = h('input', { type: 'search', id: 'log-search', placeholder: 'search as you type', size: 30 });
    this.count = h('span', { class: 'muted', id: 'log-count' });
    const whole = h('button', { type: 'button', id: 'log-search-server' }, 'Search the whole log');
    const follow = h('label', null, h('input', { type: 'checkbox', checked: true }), ' follow');
    this.box = h('div', { class: 'log', id: 'log' });
    this.hits = h('div', { class: 'hits' });
    el.append(h('div', { class: 'row' }, this.search, whole, follow, this.count), this.box, this.hits);
    this.search.addEventListener('input', () => { this.needle = this.search.value; this.redraw(); });
    whole.addEventListener('click', () => this.serverSearch());
    follow.firstChild.addEventListener('change', (e) => { this.follow = e.target.checked; });
    this.life = life;
  }

  // Reads until the job is final and every line is in. Each request waits up to 10 s for new lines
  // (kestreld answers at once when it has some); after a failure it tries again, less and less often.
  async run() {
    let pause = 1000;
    while (this.life.alive) {
      let chunk;
      try {
        chunk = await get(`/api/v1/jobs/${this.jobId}/logs`, { offset: this.offset, wait_ms: 10000 });
        pause = 1000;
        this.count.classList.remove('error');
      } catch (e) {
        if (e.status === 404 || e.status === 401 || e.status === 403) { this.box.append(errorBox(e)); return; }
        this.count.textContent = `${e.message}: trying again`;
        this.count.classList.add('error');
        await new Promise((r) => setTimeout(r, pause));
        pause = Math.min(pause * 2, 30000);
        continue;
      }
      if (!this.life.alive) return;
      this.append(chunk.lines || []);
      this.offset = Number(chunk.next_offset) || this.offset;
      if (chunk.eof) return;
    }
  }

  append(lines) {
    if (!lines.length) return;
    this.lines.push(...lines);
    if (this.lines.length > KEEP) {
      this.lines.splice(0, this.lines.length - KEEP);
      this.dropped = true;
      this.redraw();
      return;
    }
    const frag = document.createDocumentFragment();
    for (const l of lines) if (this.matches(l)) frag.append(lineNode(l, this.needle));
    this.box.append(frag);
    this.counted();
    if (this.follow) this.box.scrollTop = this.box.scrollHeight;
  }

  matches(l) { return !this.needle || l.text.toLowerCase().includes(this.needle.toLowerCase()); }

  redraw() {
    const frag = document.createDocumentFragment();
    if (this.dropped) frag.append(h('div', { class: 'muted' }, `(older lines not shown: the newest ${KEEP} are)`));
    for (const l of this.lines) if (this.matches(l)) frag.append(lineNode(l, this.needle));
    this.box.replaceChildren(frag);
    this.counted();
  }

  counted() {
    const shown = this.needle ? this.lines.filter((l) => this.matches(l)).length : this.lines.length;
    this.count.textContent = this.needle ? `${shown} of ${this.lines.length} lines match` : `${this.lines.length} lines`;
  }

  async serverSearch() {
    if (!this.needle) return;
    try {
      const res = await get('/api/v1/logs/search', { q: this.needle, job: this.jobId, icase: 1, limit: 200 });
      const hits = res.hits || [];
      this.hits.replaceChildren(h('h3', null, `${hits.length}${res.more ? '+' : ''} ${hits.length === 1 ? 'line' : 'lines'} in the whole log`),
        h('div', { class: 'log' }, hits.map((x) => lineNode({ ...x, offset: x.offset }, this.needle))));
    } catch (e) {
      this.hits.replaceChildren(errorBox(e));
    }
  }
}
