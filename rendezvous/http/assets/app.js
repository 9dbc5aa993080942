// ddprun live view: polls /api/v1/jobs four times a second and redraws the
// selected job.
// Every string from the server came from a node or a worker: it is only
// ever set as text (textContent), never parsed as HTML.
'use strict';

(function () {
  const POLL_MS = 250;
  const HISTORY = 480;       // points kept per rank (2 min at 0.25 s)
  const MAX_SERIES = 16;     // more ranks: min / median / max only
  const SPARKLINES = 64;     // ranks that get a sparkline
  const SPARK_POINTS = 120;  // its last 30 s

  let selected = decodeHash();
  let session = { access: 'read', actions: false, login: false };
  // history[jobId] = { t: [], rate: {rank: []}, loss: {rank: []} }
  const history = new Map();
  const charts = { rate: null, loss: null, rateKey: '', lossKey: '' };
  const sparks = new Map();  // rank -> uPlot

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function decodeHash() {
    const h = location.hash.replace(/^#job=/, '');
    if (!h || h === location.hash) return null;
    try { return decodeURIComponent(h); } catch (e) { return null; }
  }
  function fmt(v, digits) {
    if (v === null || v === undefined) return '–';
    if (typeof v !== 'number') return String(v);
    return Math.abs(v) >= 1000 ? v.toFixed(0) : v.toFixed(digits);
  }
  function duration(s) {
    if (s === null || s === undefined) return '–';
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    if (h > 0) return h + ' h ' + m + ' min';
    if (m > 0) return m + ' min ' + (s % 60) + ' s';
    return s + ' s';
  }
  function clock(t) {
    const d = new Date(t * 1000);
    return d.toLocaleTimeString([], { hour12: false }) + '.' +
        String(d.getMilliseconds()).padStart(3, '0').slice(0, 1);
  }
  function stateCell(state) { return el('td', state, 'state-' + state); }
  function num(v, digits) { return el('td', fmt(v, digits), 'num'); }

  // ---- data history (for the charts) ----
  function record(job, now) {
    let h = history.get(job.id);
    if (!h) { h = { t: [], rate: new Map(), loss: new Map() }; history.set(job.id, h); }
    h.t.push(now);
    const seen = new Set();
    for (const r of job.ranks) {
      seen.add(r.rank);
      for (const [key, value] of [['rate', r.steps_per_s], ['loss', r.scalars.loss]]) {
        let s = h[key].get(r.rank);
        if (!s) { s = new Array(h.t.length - 1).fill(null); h[key].set(r.rank, s); }
        s.push(value === undefined ? null : value);
      }
    }
    for (const key of ['rate', 'loss']) {
      for (const [rank, s] of h[key]) if (!seen.has(rank)) s.push(null);
    }
    if (h.t.length > HISTORY) {
      h.t.shift();
      for (const key of ['rate', 'loss']) for (const s of h[key].values()) s.shift();
    }
  }

  function seriesOf(map, t) {
    const ranks = [...map.keys()].sort((a, b) => a - b)
        .filter(rank => map.get(rank).some(v => v !== null));
    if (ranks.length <= MAX_SERIES) {
      return { labels: ranks.map(r => 'rank ' + r), data: ranks.map(r => map.get(r)) };
    }
    const lo = [], med = [], hi = [];
    for (let i = 0; i < t.length; i++) {
      const v = ranks.map(r => map.get(r)[i]).filter(x => x !== null).sort((a, b) => a - b);
      lo.push(v.length ? v[0] : null);
      hi.push(v.length ? v[v.length - 1] : null);
      med.push(v.length ? v[Math.floor(v.length / 2)] : null);
    }
    return { labels: ['min', 'median', 'max'], data: [lo, med, hi] };
  }

  const COLORS = ['#0969da', '#cf222e', '#1a7f37', '#9a6700', '#8250df', '#bf3989',
    '#0a3069', '#6e7781', '#116329', '#953800', '#57606a', '#4d2d00', '#2da44e',
    '#d4a72c', '#a475f9', '#e16f24'];

  function drawChart(kind, target, map, t) {
    if (typeof uPlot === 'undefined') return false;
    const s = seriesOf(map, t);
    if (s.data.length === 0) return false;
    const key = s.labels.join(',');
    const data = [t.slice(), ...s.data];
    const width = Math.max(320, Math.min(720, target.parentElement.parentElement.clientWidth / 2 - 24));
    if (!charts[kind] || charts[kind + 'Key'] !== key) {
      if (charts[kind]) charts[kind].destroy();
      target.textContent = '';
      charts[kind] = new uPlot({
        width, height: 180,
        series: [{}, ...s.labels.map((label, i) => ({
          label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
        }))],
        axes: [{}, { size: 50 }],
        legend: { show: s.labels.length <= MAX_SERIES },
      }, data, target);
      charts[kind + 'Key'] = key;
    } else {
      charts[kind].setData(data);
    }
    return true;
  }

  // One uPlot per rank, created once and moved into each new row (the
  // table is rebuilt on every update).
  function sparkline(cell, rank, values, t) {
    if (typeof uPlot === 'undefined') return;
    const recent = values.slice(-SPARK_POINTS);
    const data = [recent.map((_, i) => i), recent];
    let plot = sparks.get(rank);
    if (!plot) {
      plot = new uPlot({
        width: 110, height: 26, cursor: { show: false }, legend: { show: false },
        select: { show: false },
        scales: { x: { time: false } },
        axes: [{ show: false }, { show: false }],
        series: [{}, { stroke: '#0969da', width: 1 }],
      }, data, cell);
      sparks.set(rank, plot);
    } else {
      cell.appendChild(plot.root);
      plot.setData(data);
    }
  }

  // ---- rendering ----
  function renderJobs(jobs) {
    const nav = document.getElementById('jobs');
    nav.textContent = '';
    for (const job of jobs) {
      const b = el('button', null, job.id === selected ? 'selected' : '');
      b.type = 'button';
      b.dataset.job = job.id;
      b.appendChild(el('span', job.id, 'job-id'));
      b.appendChild(document.createTextNode(' '));
      b.appendChild(el('span', job.state, 'state-' + job.state));
      b.addEventListener('click', () => {
        selected = job.id;
        location.hash = 'job=' + encodeURIComponent(job.id);
        resetCharts();
        poll();
      });
      nav.appendChild(b);
    }
    document.getElementById('nojobs').hidden = jobs.length > 0;
  }

  function renderSummary(job) {
    const box = document.getElementById('summary');
    box.textContent = '';
    const item = (label, value, cls) => {
      const d = el('div', null, cls);
      d.appendChild(el('span', label, 'label'));
      d.appendChild(el('span', value, 'value'));
      box.appendChild(d);
      return d;
    };
    item('job', job.id).dataset.field = 'id';
    item('state', job.state).lastChild.className = 'value state-' + job.state;
    item('round', job.round);
    item('restarts', job.restart_count + ' / ' + job.max_restarts).dataset.field = 'restarts';
    item('nodes', job.nodes.length + ' (' + job.min_nodes + ':' + job.max_nodes + ')');
    item('world size', job.world_size);
    item('median steps/s', fmt(job.median_steps_per_s, 2));
    item('stragglers', job.stragglers);
    const p = job.progress;
    if (p.total_steps !== null) item('progress', fmt(p.steps, 0) + ' / ' + p.total_steps);
    item('ETA', duration(p.eta_s)).dataset.field = 'eta';
    if (job.reason) item('last event', job.reason, 'reason');
  }

  function renderRanks(job, h) {
    const body = document.querySelector('#ranks tbody');
    body.textContent = '';
    let i = 0;
    for (const r of job.ranks) {
      const tr = el('tr');
      tr.dataset.rank = r.rank;
      tr.dataset.state = r.state;
      tr.appendChild(num(r.rank, 0));
      tr.appendChild(el('td', r.host));
      tr.appendChild(num(r.local_rank, 0));
      const pid = num(r.pid, 0); pid.classList.add('pid'); tr.appendChild(pid);
      const st = stateCell(r.state); st.classList.add('rank-state'); tr.appendChild(st);
      const steps = num(r.steps, 0); steps.classList.add('steps'); tr.appendChild(steps);
      tr.appendChild(num(r.steps_per_s, 2));
      const spark = el('td', null, 'spark');
      tr.appendChild(spark);
      tr.appendChild(num(r.scalars.loss, 4));
      tr.appendChild(num(r.scalars.samples_per_s, 1));
      const others = Object.entries(r.scalars)
          .filter(([k]) => k !== 'loss' && k !== 'samples_per_s')
          .map(([k, v]) => k + '=' + fmt(v, 4)).join('  ');
      const other = el('td', others);
      if (r.straggler) other.prepend(el('span', 'straggler ', 'straggler'));
      tr.appendChild(other);
      tr.appendChild(el('td', duration(r.eta_s)));
      if (r.straggler) tr.classList.add('straggler-row');
      body.appendChild(tr);
      const values = h && h.rate.get(r.rank);
      if (values && i < SPARKLINES) sparkline(spark, r.rank, values, h.t);
      i++;
    }
    const shown = new Set(job.ranks.slice(0, SPARKLINES).map(r => r.rank));
    for (const [rank, plot] of sparks) {
      if (!shown.has(rank)) { plot.destroy(); sparks.delete(rank); }
    }
  }

  function renderNodes(job) {
    const body = document.querySelector('#nodes tbody');
    body.textContent = '';
    for (const n of job.nodes) {
      const tr = el('tr');
      tr.dataset.node = n.node_id;
      tr.appendChild(el('td', n.node_id));
      tr.appendChild(el('td', n.host));
      tr.appendChild(el('td', n.addr));
      tr.appendChild(stateCell(n.state));
      tr.appendChild(num(n.group_rank, 0));
      tr.appendChild(num(n.local_world_size, 0));
      tr.appendChild(el('td', fmt(n.heartbeat_age_s, 1) + ' s', 'num'));
      tr.appendChild(num(n.worker_restarts, 0));
      body.appendChild(tr);
    }
  }

  function renderTimeline(job) {
    const list = document.getElementById('timeline');
    list.textContent = '';
    for (const e of [...job.events].reverse()) {
      const li = el('li');
      li.dataset.kind = e.kind;
      li.dataset.round = e.round;
      if (e.cause) li.dataset.cause = e.cause;
      li.appendChild(el('span', clock(e.time), 'time'));
      li.appendChild(el('span', e.kind.replace(/_/g, ' ') + (e.cause ? ' (' + e.cause.replace(/_/g, ' ') + ')' : ''),
                        'kind state-' + e.kind));
      li.appendChild(el('span', e.reason, 'reason'));
      list.appendChild(li);
    }
  }

  function renderDiagnosis(job) {
    const box = document.getElementById('diagnosis');
    const d = job.diagnosis;
    box.hidden = !d;
    if (!d) return;
    document.getElementById('diagnosis-paragraph').textContent =
        d.paragraph || (d.complete ? '' : 'waiting for the nodes to answer…');
    const lines = d.ranks.slice();
    for (const n of d.missing_nodes) lines.push(n + ': no answer yet');
    lines.push('dump ' + d.request_id + ': ' + d.reason);
    document.getElementById('diagnosis-ranks').textContent = lines.join('\n');
  }

  function resetCharts() {
    for (const kind of ['rate', 'loss']) {
      if (charts[kind]) charts[kind].destroy();
      charts[kind] = null; charts[kind + 'Key'] = '';
    }
    for (const plot of sparks.values()) plot.destroy();
    sparks.clear();
  }

  function render(data) {
    const jobs = data.jobs;
    const now = data.time;
    for (const job of jobs) record(job, now);
    for (const id of [...history.keys()]) {
      if (!jobs.some(j => j.id === id)) history.delete(id);
    }
    if (!jobs.some(j => j.id === selected)) {
      selected = jobs.length ? jobs[0].id : null;
      resetCharts();
    }
    renderJobs(jobs);
    const job = jobs.find(j => j.id === selected);
    document.getElementById('job').hidden = !job;
    if (!job) return;
    const h = history.get(job.id);
    renderSummary(job);
    renderDiagnosis(job);
    renderRanks(job, h);
    renderNodes(job);
    renderTimeline(job);
    drawChart('rate', document.getElementById('chart-rate'), h.rate, h.t);
    document.getElementById('loss-figure').hidden =
        !drawChart('loss', document.getElementById('chart-loss'), h.loss, h.t);
    document.getElementById('actions').hidden = !(session.actions && session.access === 'admin');
  }

  // ---- polling and actions ----
  let inFlight = false;
  async function poll() {
    if (inFlight) return;
    inFlight = true;
    const conn = document.getElementById('connection');
    try {
      const r = await fetch('/api/v1/jobs', { cache: 'no-store', credentials: 'same-origin' });
      if (r.status === 401) { location.assign('/login'); return; }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const data = await r.json();
      document.getElementById('server').textContent =
          'rendezvous ' + data.server.version + ', ' + data.jobs.length + ' job(s)';
      render(data);
      conn.textContent = 'updated ' + clock(data.time);
      conn.className = 'connection';
    } catch (e) {
      conn.textContent = 'no answer from the server (' + e.message + ')';
      conn.className = 'connection down';
    } finally {
      inFlight = false;
    }
  }

  async function act(what) {
    if (!selected) return;
    const result = document.getElementById('action-result');
    if (what === 'stop' && !confirm('Stop job ' + selected + '? Its agents stop their workers and exit.')) return;
    result.textContent = '…';
    try {
      const r = await fetch('/api/v1/jobs/' + encodeURIComponent(selected) + '/' + what, {
        method: 'POST', credentials: 'same-origin', cache: 'no-store',
        headers: { 'X-Ddprun-Action': '1' },
      });
      const body = await r.json().catch(() => ({}));
      result.textContent = r.ok ? (body.message || 'done') : ('refused: ' + (body.error || r.status));
    } catch (e) {
      result.textContent = 'failed: ' + e.message;
    }
    poll();
  }

  async function start() {
    try {
      const r = await fetch('/api/v1/session', { cache: 'no-store', credentials: 'same-origin' });
      if (r.status === 401) { location.assign('/login'); return; }
      if (r.ok) session = await r.json();
    } catch (e) { /* the poll says it */ }
    document.getElementById('logout').hidden = !session.login;
    document.getElementById('action-stacks').addEventListener('click', () => act('stacks'));
    document.getElementById('action-stop').addEventListener('click', () => act('stop'));
    window.addEventListener('hashchange', () => {
      const h = decodeHash();
      if (h !== null && h !== selected) { selected = h; resetCharts(); poll(); }
    });
    poll();
    setInterval(poll, POLL_MS);
  }

  start();
})();
