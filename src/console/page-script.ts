/**
 * The console page's script (inlined by page.ts under the CSP nonce). It polls /api/state every second and
 * renders it through the DOM: text through textContent, charts as SVG elements made with createElementNS,
 * never innerHTML, so no value (much of it replicas' words) becomes markup. When the console does not answer
 * within FETCH_TIMEOUT_MS, or its last poll is older than the state's staleAfterMs, every tile is greyed as
 * stale instead of keeping its last colour. Every time shown is UTC and says so.
 */
export const PAGE_SCRIPT = `
'use strict';
/** A console that does not answer in 3 s is stopped, hung or unreachable: the page says so rather than wait. */
const FETCH_TIMEOUT_MS = 3000;
const SVG = 'http://www.w3.org/2000/svg';
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
function td(children) {
  const cell = document.createElement('td');
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
function rate(value) {
  return value === null || value === undefined ? '…' : value < 10 ? value.toFixed(2) : value.toFixed(0);
}
function holderCell(hex, name) {
  const cell = td([name ? el('div', name) : null, el('div', hex.length > 16 ? hex.slice(0, 16) + '…' : hex, 'mono claim')]);
  cell.title = hex;
  return cell;
}
function replicaRow(r) {
  const tr = document.createElement('tr');
  tr.dataset.replica = String(r.replica);
  tr.dataset.faulty = r.faulty === null ? 'false' : 'true';
  tr.dataset.reachable = r.reachable ? 'true' : 'false';
  const down = r.reachable ? null : el('div', 'down since ' + utc(r.downSince), 'down-since');
  const state = r.faulty !== null
    ? td([el('div', 'faulty', 'bad state'), el('div', r.faulty, 'claim reason'),
          el('div', 'since ' + utc(r.faultySince), 'claim'), r.reachable ? null : el('div', 'unreachable', 'warn'), down])
    : td([el('div', r.reachable ? 'ok' : 'unreachable', (r.reachable ? 'ok' : 'warn') + ' state'), down,
          r.reachable ? null : el('div', r.connection, 'claim')]);
  const h = r.health;
  const health = 'error' in h
    ? td([el('span', h.error, 'warn')])
    : td([el('div', 'version ' + (h.version ?? '?')),
          el('div', 'up ' + (h.uptimeSeconds === null ? '?' : h.uptimeSeconds + ' s')),
          h.mismatch ? el('div', h.mismatch, 'bad') : null,
          el('div', 'last error: ' + (h.lastError ? h.lastError.at + ' ' + h.lastError.message : 'none'), 'claim')]);
  const m = r.metrics;
  const refusals = m.refusalsPerSecond ?? {};
  const figures = 'error' in m
    ? td([el('span', m.error, 'warn')])
    : td([el('div', 'grants/s ' + rate(m.grantsPerSecond)),
          el('div', 'refusals/s ' + (Object.entries(refusals).filter(([, v]) => v > 0).map(([k, v]) => k + ' ' + rate(v)).join(', ') || '0')),
          el('div', 'fsync ' + (m.flushMeanMs === null ? '–' : m.flushMeanMs.toFixed(2) + ' ms') + ' (' + m.flushes + ' flushes)')]);
  const store = 'error' in m
    ? el('td', '–')
    : td([el('div', 'records ' + (m.signingRecords ?? '?'), 'records'), el('div', 'floor ' + (m.epochFloor ?? '?'), 'floor')]);
  for (const cell of [el('td', r.replica), td([el('div', r.endpoint, 'mono')]), state, health, figures, store,
                      el('td', r.leasesListed === null ? '–' : r.leasesListed)]) tr.appendChild(cell);
  return tr;
}
function leaseRow(l) {
  const tr = row([td([el('span', l.resource, 'mono')]), el('td', l.epoch), holderCell(l.holder, l.holderName),
                  el('td', ms(l.remainingMs)), el('td', l.reportedBy.join(', '))]);
  tr.dataset.resource = l.resource;
  tr.dataset.epoch = l.epoch;
  tr.dataset.holder = l.holder;
  return tr;
}
function evidenceRow(e) {
  const link = e.downloadable ? el('a', 'download JSON') : el('span', 'not transferable', 'claim');
  if (e.downloadable) {
    link.href = '/api/evidence/' + e.id + '.json';
    link.download = 'equivocation-replica-' + e.replica + '-' + e.id + '.json';
  }
  const tr = row([el('td', e.id), el('td', e.kind), el('td', e.replica), td([el('span', e.resource, 'mono')]),
                  el('td', e.epoch), el('td', utc(e.observedAt)), td([link])]);
  tr.dataset.evidence = String(e.id);
  return tr;
}
function alertRow(a) {
  const labels = a.instances.map((i) => (Object.entries(i.labels).map(([k, v]) => k + '=' + v).join(' ') || 'cluster') +
    ' (' + i.state + ' since ' + utc(i.since) + ')');
  const cls = a.state === 'firing' ? (a.severity === 'critical' ? 'bad' : 'warn') : a.state === 'pending' ? 'warn' : 'claim';
  const tr = row([el('td', a.alert), el('td', a.severity), td([el('span', a.state, cls)]),
                  td([...labels.map((text) => el('div', text)), a.note ? el('div', a.note, 'claim') : null])]);
  tr.dataset.alert = a.alert;
  tr.dataset.state = a.state;
  return tr;
}
/** One small line chart: a polyline per series over the history's window, the newest point at the right. */
function chart(id, title, history, series) {
  const width = 420, height = 110, left = 40, right = 8, top = 8, bottom = 18;
  const root = svg('svg', { viewBox: '0 0 ' + width + ' ' + height, width, height, role: 'img', 'aria-label': title });
  const points = history.points;
  const end = points.length ? Date.parse(points[points.length - 1].at) : 0;
  const start = end - history.windowSeconds * 1000;
  const values = series.flatMap((s) => points.map(s.value)).filter((v) => v !== null && v !== undefined);
  let low = Math.min(0, ...values), high = Math.max(1, ...values);
  if (high === low) high = low + 1;
  const x = (at) => left + ((Date.parse(at) - start) / (end - start || 1)) * (width - left - right);
  const y = (v) => top + (1 - (v - low) / (high - low)) * (height - top - bottom);
  root.appendChild(svg('line', { x1: left, x2: width - right, y1: y(0), y2: y(0), class: 'axis' }));
  root.appendChild(svg('text', { x: left - 4, y: top + 8, class: 'tick', 'text-anchor': 'end' }, rate(high)));
  root.appendChild(svg('text', { x: left - 4, y: height - bottom, class: 'tick', 'text-anchor': 'end' }, rate(low)));
  root.appendChild(svg('text', { x: left, y: height - 4, class: 'tick' }, '−' + history.windowSeconds / 60 + ' min'));
  root.appendChild(svg('text', { x: width - right, y: height - 4, class: 'tick', 'text-anchor': 'end' },
    points.length ? utc(points[points.length - 1].at).slice(11) : 'no data'));
  series.forEach((s, k) => {
    const coords = points.filter((p) => s.value(p) !== null && s.value(p) !== undefined)
      .map((p) => x(p.at).toFixed(1) + ',' + y(s.value(p)).toFixed(1));
    if (coords.length === 0) return;
    root.appendChild(svg('polyline', { points: coords.join(' '), class: 'line s' + (k % 6) }));
    // The newest point, marked: a chart of one bucket is a dot, not nothing.
    const [cx, cy] = coords[coords.length - 1].split(',');
    root.appendChild(svg('circle', { cx, cy, r: 2.5, class: 'dot s' + (k % 6) }));
  });
  const figure = el('figure', undefined, 'chart');
  figure.id = id;
  const caption = el('figcaption', title);
  for (const [k, s] of series.entries()) caption.appendChild(el('span', ' ' + s.name, 'key s' + (k % 6)));
  figure.append(caption, root);
  return figure;
}
function charts(s) {
  const reasons = [...new Set(s.history.points.flatMap((p) => Object.keys(p.refusalsPerSecond)))].sort();
  $('charts').replaceChildren(
    chart('chart-margin', 'quorum margin (worst per ' + s.history.bucketSeconds + ' s)', s.history, [{ name: 'margin', value: (p) => p.margin }]),
    chart('chart-grants', 'new grants/s (sum of replicas)', s.history, [{ name: 'grants/s', value: (p) => p.grantsPerSecond }]),
    chart('chart-refusals', 'refusals/s by reason (sum of replicas)', s.history,
      reasons.length ? reasons.map((r) => ({ name: r, value: (p) => p.refusalsPerSecond[r] ?? 0 })) : [{ name: 'none', value: () => 0 }]),
  );
}
function render(s) {
  $('cluster').textContent = 'cluster ' + s.cluster.id.slice(0, 16) + '…  ·  n = ' + s.cluster.n + ', f = ' + s.cluster.f +
    ', an acquire needs ' + s.cluster.t + '  ·  poll ' + s.polls + (s.polledAt ? ' at ' + utc(s.polledAt) : '') +
    (s.lastPollMs === null ? '' : ' (' + s.lastPollMs + ' ms)');
  // Before the first poll there is no margin to show, only the console starting.
  $('margin').textContent = s.polls === 0 ? '…' : String(s.margin);
  $('margin').className = 'big ' + (s.polls === 0 ? '' : s.margin > 0 ? 'ok' : s.margin === 0 ? 'warn' : 'bad');
  $('available').textContent = s.available + ' of ' + s.cluster.n;
  $('leaseCount').textContent = String(s.leases.length);
  const firing = s.alerts.filter((a) => a.state === 'firing');
  $('alertCount').textContent = String(firing.length);
  $('alertCount').className = 'big ' + (firing.some((a) => a.severity === 'critical') ? 'bad' : firing.length ? 'warn' : 'ok');
  charts(s);
  fill($('alerts'), s.alerts.map(alertRow), 4, 'no poll yet');
  fill($('replicas'), s.replicas.map(replicaRow), 7, 'no poll yet');
  fill($('leases'), s.leases.map(leaseRow), 5, 'no lease that f+1 replicas confirm');
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
