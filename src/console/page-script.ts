/**
 * The console page's script (inlined by page.ts under the CSP nonce). It polls /api/state every second and
 * renders it through the DOM: text through textContent, charts as SVG elements made with createElementNS,
 * never innerHTML, so no value (much of it replicas' words) becomes markup. When the console does not answer
 * within FETCH_TIMEOUT_MS, or its last poll is older than the state's staleAfterMs, every tile is greyed as
 * stale instead of keeping its last colour. Every time shown is UTC and says so. Chart tooltips are SVG <title>
 * elements, which the browser shows on its own: no script runs for them.
 */
export const PAGE_SCRIPT = `
'use strict';
/** A console that does not answer in 3 s is stopped, hung or unreachable: the page says so rather than wait. */
const FETCH_TIMEOUT_MS = 3000;
const SVG = 'http://www.w3.org/2000/svg';
/** A chart's gap: buckets further apart than this had no poll (the console was stopped). */
const GAP_BUCKETS = 2;
const $ = (id) => document.getElementById(id);
let lastUpdate = null;
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function svg(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}
function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el('td', c));
  return tr;
}
function td(children, cls) {
  const cell = document.createElement('td');
  if (cls) cell.className = cls;
  for (const c of children) if (c) cell.appendChild(c instanceof Node ? c : el('span', c));
  return cell;
}
function fill(tbody, rows, columns, emptyText) {
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    const cell = el('td', emptyText, 'empty');
    cell.colSpan = columns;
    tr.appendChild(cell);
    tbody.appendChild(tr);
  }
}
function ms(value) {
  return value >= 1000 ? (value / 1000).toFixed(1) + ' s' : Math.round(value) + ' ms';
}
/** An ISO time as "2026-01-01 03:04:05 UTC". */
function utc(iso) {
  return iso ? iso.slice(0, 19).replace('T', ' ') + ' UTC' : '–';
}
/** An ISO time as "03:04:05 UTC". */
function clock(iso) {
  return iso ? iso.slice(11, 19) + ' UTC' : '–';
}
function rate(value) {
  return value === null || value === undefined ? '…' : value < 10 ? value.toFixed(2) : value.toFixed(0);
}
function holderCell(hex, name) {
  const cell = td([name ? el('div', name) : null, el('div', hex.length > 16 ? hex.slice(0, 16) + '…' : hex, 'mono claim')]);
  cell.title = hex;
  return cell;
}
/** The status line: what is true now, since when, why, and what to do (each action links its runbook). */
function situation(s) {
  const cls = { healthy: 'ok', degraded: 'warn', unavailable: 'bad' }[s.status] || '';
  $('situation').dataset.status = s.status;
  document.body.dataset.status = s.status;
  $('headline').textContent = s.headline;
  $('headline').className = cls;
  $('status-since').textContent = s.statusSince ? s.status + ' since ' + utc(s.statusSince) : '';
  $('reasons').replaceChildren(...s.reasons.map((r) => {
    const li = el('li', r.text, r.severity === 'unavailable' ? 'bad' : r.severity === 'degraded' ? 'warn' : 'claim');
    li.dataset.reason = r.code;
    return li;
  }));
  $('actions').replaceChildren(...s.actions.map((a) => {
    const li = el('li', a.text + ' ');
    li.dataset.action = a.code;
    li.dataset.runbook = a.runbook;
    const link = el('a', 'runbook');
    link.href = '#runbook-' + a.runbook;
    li.appendChild(link);
    return li;
  }));
  $('actions-title').hidden = s.actions.length === 0;
}
function stateCell(r, timeoutMs) {
  const since = r.reachable ? null : el('div', (r.unreachableAs || 'unreachable') + ' since ' + utc(r.downSince), 'down-since');
  const how = r.reachable ? null : el('div', r.connection, 'claim reason');
  if (r.faulty !== null)
    return td([el('div', 'faulty', 'bad state'), el('div', r.faulty, 'claim reason'),
               el('div', 'since ' + utc(r.faultySince), 'claim'), since], 'state-cell');
  if (r.reachable) return td([el('div', 'ok', 'ok state')], 'state-cell');
  const label = r.unreachableAs === 'hung' ? 'hung: connection open, no answer within ' + ms(timeoutMs)
    : r.unreachableAs === 'login_refused' ? 'refuses the console’s login'
    : 'down: no connection';
  return td([el('div', label, 'warn state'), since, how], 'state-cell');
}
function replicaRow(r, timeoutMs) {
  const tr = document.createElement('tr');
  tr.dataset.replica = String(r.replica);
  tr.dataset.faulty = r.faulty === null ? 'false' : 'true';
  tr.dataset.reachable = r.reachable ? 'true' : 'false';
  tr.dataset.unreachable = r.unreachableAs || '';
  const h = r.health;
  const health = 'error' in h
    ? td([el('span', h.error, 'warn')])
    : td([el('div', 'version ' + (h.version ?? '?')),
          el('div', 'up ' + (h.uptimeSeconds === null ? '?' : h.uptimeSeconds + ' s')),
          h.mismatch ? el('div', h.mismatch, 'bad') : null,
          el('div', 'last error: ' + (h.lastError ? h.lastError.at + ' ' + h.lastError.message : 'none'), 'claim reason')]);
  const m = r.metrics;
  const refusals = m.refusalsPerSecond ?? {};
  const p99 = m.flushP99Ms === null || m.flushP99Ms === undefined ? null : m.flushP99Ms;
  const figures = 'error' in m
    ? td([el('span', m.error, 'warn')])
    : td([el('div', 'grants/s ' + rate(m.grantsPerSecond)),
          el('div', 'refusals/s ' + (Object.entries(refusals).filter(([, v]) => v > 0).map(([k, v]) => k + ' ' + rate(v)).join(', ') || '0')),
          el('div', 'fsync mean ' + (m.flushMeanMs === null ? '–' : m.flushMeanMs.toFixed(2) + ' ms'), 'fsync-mean'),
          el('div', 'fsync p99 (5 min) ' + (p99 === null ? '– (no flush in the window)' : p99.toFixed(1) + ' ms'), 'fsync-p99' + (p99 !== null && p99 > 50 ? ' warn' : '')),
          el('div', m.flushes + ' flushes', 'claim')], 'figures');
  const store = 'error' in m
    ? el('td', '–')
    : td([el('div', 'records ' + (m.signingRecords ?? '?'), 'records'), el('div', 'floor ' + (m.epochFloor ?? '?'), 'floor')]);
  const listed = r.leasesListed === null ? '–' : r.leasesListed + (r.leasesCut ? ' (cut: more run)' : '');
  for (const cell of [el('td', r.replica), stateCell(r, timeoutMs), td([el('div', r.endpoint, 'mono endpoint')]), health, figures,
                      store, el('td', listed, r.leasesCut ? 'warn' : '')]) tr.appendChild(cell);
  return tr;
}
function leaseRow(l, t) {
  const risk = l.atRisk
    ? el('td', 'at risk: listed by ' + l.reportedBy.length + ', a renewal needs ' + t, 'warn')
    : el('td', 'ok', 'claim');
  const tr = row([td([el('span', l.resource, 'mono')]), el('td', l.epoch), holderCell(l.holder, l.holderName),
                  el('td', ms(l.remainingMs)), el('td', l.reportedBy.join(', ')), risk]);
  tr.dataset.resource = l.resource;
  tr.dataset.epoch = l.epoch;
  tr.dataset.holder = l.holder;
  tr.dataset.atRisk = l.atRisk ? 'true' : 'false';
  return tr;
}
function watchedRow(w) {
  const tr = row([td([el('span', w.resource, 'mono')]), el('td', w.leased ? 'running' : 'none', w.leased ? 'ok' : 'claim'),
                  el('td', w.epoch ?? '–'), el('td', w.remainingMs === null ? '–' : ms(w.remainingMs)),
                  el('td', String(w.answered)), el('td', w.listed ? 'yes' : 'no', w.listed ? '' : 'warn')]);
  tr.dataset.resource = w.resource;
  tr.dataset.leased = w.leased ? 'true' : 'false';
  return tr;
}
function evidenceRow(e) {
  const link = el('a', 'download JSON');
  link.href = '/api/evidence/' + e.id + '.json';
  link.download = e.kind + '-replica-' + e.replica + '-' + e.id + '.json';
  const where = e.resource ? e.resource + (e.epoch ? ' @ ' + e.epoch : '') : '–';
  const tr = row([el('td', e.id), el('td', e.kind), el('td', e.replica), td([el('span', e.reason, 'reason')]),
                  td([el('span', where, 'mono')]), el('td', utc(e.observedAt)),
                  td([link, el('div', e.transferable ? 'anyone can check it' : 'the console’s record', 'claim')])]);
  tr.dataset.evidence = String(e.id);
  tr.dataset.kind = e.kind;
  return tr;
}
function alertRow(a) {
  const labels = a.instances.map((i) => (Object.entries(i.labels).map(([k, v]) => k + '=' + v).join(' ') || 'cluster') +
    ' (' + i.state + ' since ' + utc(i.since) + (i.state === 'pending' ? ', fires at ' + clock(i.firesAt) : '') + ')');
  const cls = a.state === 'firing' ? (a.severity === 'critical' ? 'bad' : 'warn') : a.state === 'pending' ? 'warn' : 'claim';
  const tr = row([el('td', a.alert), el('td', a.severity), td([el('span', a.state, cls)]),
                  td([...labels.map((text) => el('div', text)), a.note ? el('div', a.note, 'claim') : null])]);
  tr.dataset.alert = a.alert;
  tr.dataset.state = a.state;
  return tr;
}
/** About 4 round steps (1, 2 or 5 times a power of ten) covering [low, high]. */
function ticks(low, high, integers) {
  const raw = (high - low) / 3;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 5, 10].map((k) => k * power).find((s) => s >= raw) || raw;
  if (integers) step = Math.max(1, Math.round(step));
  const out = [];
  for (let v = Math.ceil(low / step) * step; v <= high + step / 1e6 && out.length < 8; v += step) out.push(Number(v.toFixed(6)));
  return out;
}
/**
 * One line chart over the history's window, the newest bucket at the right: labelled ticks on both axes, a gap where
 * the console kept no data, and a tooltip (an SVG title) per bucket with its time and values.
 */
function chart(id, title, history, series, integers) {
  const width = 480, height = 150, left = 36, right = 10, top = 10, bottom = 30;
  const root = svg('svg', { viewBox: '0 0 ' + width + ' ' + height, role: 'img', 'aria-label': title });
  const points = history.points;
  const bucket = history.bucketSeconds * 1000;
  const end = points.length ? Date.parse(points[points.length - 1].at) + bucket : Date.now();
  const start = end - history.windowSeconds * 1000;
  const values = series.flatMap((s) => points.map(s.value)).filter((v) => v !== null && v !== undefined);
  let low = Math.min(0, ...values), high = Math.max(1, ...values);
  if (high === low) high = low + 1;
  const yTicks = ticks(low, high, integers);
  low = Math.min(low, yTicks[0]);
  high = Math.max(high, yTicks[yTicks.length - 1]);
  const plotWidth = width - left - right;
  const x = (at) => left + ((at - start) / (end - start)) * plotWidth;
  const y = (v) => top + (1 - (v - low) / (high - low)) * (height - top - bottom);
  for (const v of yTicks) {
    root.appendChild(svg('line', { x1: left, x2: width - right, y1: y(v), y2: y(v), class: v === 0 ? 'axis' : 'grid' }));
    root.appendChild(svg('text', { x: left - 4, y: y(v) + 3, class: 'tick', 'text-anchor': 'end' }, integers ? String(v) : rate(v)));
  }
  // Every 5 minutes of wall-clock time, labelled HH:MM (UTC).
  const step = 5 * 60_000;
  for (let at = Math.ceil(start / step) * step; at <= end; at += step) {
    root.appendChild(svg('line', { x1: x(at), x2: x(at), y1: top, y2: height - bottom + 3, class: 'grid' }));
    root.appendChild(svg('text', { x: x(at), y: height - bottom + 14, class: 'tick', 'text-anchor': 'middle' },
      new Date(at).toISOString().slice(11, 16)));
  }
  root.appendChild(svg('text', { x: width - right, y: height - 2, class: 'tick', 'text-anchor': 'end' },
    points.length ? 'UTC, newest ' + clock(points[points.length - 1].at) : 'no data yet'));
  // Stretches with no bucket (the console was stopped, or had not started): shaded, never drawn through.
  const times = points.map((p) => Date.parse(p.at));
  const gaps = [];
  if (times.length && times[0] - start > GAP_BUCKETS * bucket) gaps.push([start, times[0]]);
  for (let k = 1; k < times.length; k++) if (times[k] - times[k - 1] > GAP_BUCKETS * bucket) gaps.push([times[k - 1] + bucket, times[k]]);
  for (const [from, to] of gaps) {
    const g = svg('rect', { x: x(from), y: top, width: Math.max(0, x(to) - x(from)), height: height - top - bottom, class: 'gap' });
    g.appendChild(svg('title', {}, 'no data ' + clock(new Date(from).toISOString()) + ' – ' + clock(new Date(to).toISOString())));
    root.appendChild(g);
    if (x(to) - x(from) > 50)
      root.appendChild(svg('text', { x: ((x(from) + x(to)) / 2).toFixed(1), y: (top + (height - bottom)) / 2, class: 'gap-label', 'text-anchor': 'middle' }, 'no data'));
  }
  series.forEach((s, k) => {
    let run = [];
    const flush = () => {
      if (run.length) root.appendChild(svg('polyline', { points: run.join(' '), class: 'line s' + (k % 6) }));
      run = [];
    };
    points.forEach((p, i) => {
      const v = s.value(p);
      if (i > 0 && times[i] - times[i - 1] > GAP_BUCKETS * bucket) flush();
      if (v === null || v === undefined) return flush();
      run.push(x(times[i] + bucket / 2).toFixed(1) + ',' + y(v).toFixed(1));
    });
    flush();
    const last = [...points].reverse().find((p) => s.value(p) !== null && s.value(p) !== undefined);
    if (last) root.appendChild(svg('circle', { cx: x(Date.parse(last.at) + bucket / 2).toFixed(1), cy: y(s.value(last)).toFixed(1), r: 2.5, class: 'dot s' + (k % 6) }));
  });
  // One hover area per bucket, its title the bucket's time and every series' value there.
  const hitWidth = (bucket / (end - start)) * plotWidth;
  points.forEach((p, i) => {
    const text = clock(p.at) + ' — ' + series.map((s) => {
      const v = s.value(p);
      return s.name + ' ' + (v === null || v === undefined ? '–' : integers ? String(v) : rate(v));
    }).join(', ');
    const hit = svg('rect', { x: x(times[i]).toFixed(1), y: top, width: hitWidth.toFixed(2), height: height - top - bottom, class: 'hit' });
    hit.appendChild(svg('title', {}, text));
    root.appendChild(hit);
  });
  const figure = el('figure', undefined, 'chart');
  figure.id = id;
  const caption = el('figcaption', title);
  for (const [k, s] of series.entries()) caption.appendChild(el('span', ' ' + s.name, 'key s' + (k % 6)));
  figure.append(caption, root);
  return figure;
}
function charts(s) {
  const h = s.history;
  const reasons = [...new Set(h.points.flatMap((p) => Object.keys(p.refusalsPerSecond)))].sort();
  const windowStart = Date.parse(s.servedAt) - h.windowSeconds * 1000;
  $('history-note').textContent = !h.dataSince
    ? 'No data yet.'
    : (Date.parse(h.dataSince) > windowStart + 2 * h.bucketSeconds * 1000
      ? 'Data since ' + utc(h.dataSince) + ': the console kept nothing earlier. '
      : 'The last ' + h.windowSeconds / 60 + ' minutes. ') +
      (s.persistence.enabled
        ? (s.persistence.restoredFrom ? 'Restored at this console’s start from --data (written ' + utc(s.persistence.restoredFrom) + '); shaded stretches had no poll.' : 'Kept in --data across restarts.')
        : 'Kept in memory only: a restart starts over (give --data to keep it).') +
      ' Point at a chart for a bucket’s values.';
  $('charts').replaceChildren(
    chart('chart-margin', 'quorum margin (worst per ' + h.bucketSeconds + ' s)', h, [{ name: 'margin', value: (p) => p.margin }], true),
    chart('chart-grants', 'new grants/s (sum of replicas)', h, [{ name: 'grants/s', value: (p) => p.grantsPerSecond }], false),
    chart('chart-refusals', 'refusals/s by reason (sum of replicas; stale and busy are contention, not faults)', h,
      reasons.length ? reasons.map((r) => ({ name: r, value: (p) => p.refusalsPerSecond[r] ?? 0 })) : [{ name: 'none', value: () => 0 }], false),
  );
}
function tiles(s) {
  const started = s.polls > 0;
  // Before the first poll there is no margin to show, only the console starting. Amber as soon as any replica is not
  // available, however many may still fail: N = 7 with one down is not all well.
  $('margin').textContent = started ? String(s.margin) : '…';
  $('margin').className = 'big ' + (!started ? '' : s.margin < 0 ? 'bad' : s.margin === 0 || s.available < s.cluster.n ? 'warn' : 'ok');
  $('available').textContent = s.available + ' of ' + s.cluster.n;
  $('available').className = 'big ' + (!started ? '' : s.available < s.cluster.t ? 'bad' : s.available < s.cluster.n ? 'warn' : 'ok');
  const atRisk = s.leases.filter((l) => l.atRisk).length;
  $('leaseCount').textContent = String(s.leases.length);
  $('leaseCount').className = 'big ' + (atRisk ? 'warn' : '');
  $('leaseNote').textContent = (atRisk ? atRisk + ' at risk' : '') +
    (s.leaseLists.cut.length ? (atRisk ? '; ' : '') + 'lists cut: more run than shown' : '');
  $('leaseNote').className = 'note ' + (atRisk || s.leaseLists.cut.length ? 'warn' : '');
  const a = s.alertSummary;
  $('alertCount').textContent = a.firing + ' firing';
  $('alertCount').className = 'big ' + (a.firingCritical ? 'bad' : a.firing || a.pending ? 'warn' : 'ok');
  $('alertPending').textContent = a.pending ? a.pending + ' pending, the first fires at ' + clock(a.nextFiresAt) : 'none pending';
  $('alertPending').className = 'note ' + (a.pending ? 'warn' : 'claim');
}
function render(s) {
  $('cluster').textContent = 'cluster ' + s.cluster.id.slice(0, 16) + '…  ·  n = ' + s.cluster.n + ', f = ' + s.cluster.f +
    ', an acquire needs ' + s.cluster.t + '  ·  poll ' + s.polls + (s.polledAt ? ' at ' + utc(s.polledAt) : '') +
    (s.lastPollMs === null ? '' : ' (' + s.lastPollMs + ' ms)');
  situation(s);
  tiles(s);
  const byIndex = new Map(s.replicas.map((r) => [r.replica, r]));
  const ordered = s.replicaOrder.map((i) => byIndex.get(i)).filter(Boolean);
  fill($('replicas'), ordered.map((r) => replicaRow(r, s.timeoutMs)), 7, 'no poll yet');
  charts(s);
  fill($('alerts'), s.alerts.map(alertRow), 4, 'no poll yet');
  const cut = s.leaseLists.cut;
  $('leases-cut').hidden = cut.length === 0;
  $('leases-cut').textContent = cut.length === 0 ? '' : 'Replica' + (cut.length > 1 ? 's ' : ' ') + cut.join(', ') +
    ' listed only the ' + s.leaseLists.limit + ' leases ending last and said more are running: leases ending sooner are not shown here, nor flagged at risk. ' +
    'To see one, give the console --watch RESOURCE (shown under Watched resources) or run quorumfence status RESOURCE.';
  fill($('leases'), s.leases.map((l) => leaseRow(l, s.cluster.t)), 6,
    cut.length ? 'no lease that f+1 replicas confirm among the leases listed' : 'no lease that f+1 replicas confirm');
  $('watched-section').hidden = s.watched.length === 0;
  fill($('watched'), s.watched.map(watchedRow), 6, 'none');
  fill($('recent'), s.recentGrants.map((g) => row([td([el('span', g.resource, 'mono')]), el('td', g.epoch),
      holderCell(g.holder, g.holderName), el('td', utc(g.firstSeenAt))])), 4, 'none seen yet');
  fill($('evidence'), s.evidence.map(evidenceRow), 7, 'no evidence');
}
function setStale(reason) {
  document.body.dataset.stale = reason ? 'true' : 'false';
  $('status').textContent = reason ? 'STALE: ' + reason : 'live, updated ' + utc(lastUpdate);
  $('status').className = reason ? 'bad' : 'ok';
}
async function poll() {
  try {
    const response = await fetch('/api/state', { cache: 'no-store', signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    if (!response.ok) throw new Error('HTTP ' + response.status);
    const s = await response.json();
    render(s);
    lastUpdate = s.servedAt;
    const age = s.polledAt ? Date.parse(s.servedAt) - Date.parse(s.polledAt) : 0;
    setStale(age > s.staleAfterMs ? 'the console has not polled the replicas since ' + utc(s.polledAt) : null);
  } catch (error) {
    setStale('the console does not answer (' + error.message + '); figures as of ' + utc(lastUpdate));
  } finally {
    setTimeout(poll, 1000);
  }
}
poll();
`;
