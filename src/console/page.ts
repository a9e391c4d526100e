/**
 * The console's one page: self-contained (inline style and script, no external link), polling /api/state
 * every second. Every value from the state (much of it replicas' words) reaches the page through
 * textContent or an attribute set by the DOM API, never as HTML, so a lying replica cannot inject markup;
 * the Content-Security-Policy the server sends allows only this page's own inline script and style (by
 * nonce) and requests to its own origin.
 */

const STYLE = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1b1f24; background: #f6f8fa; }
h1 { font-size: 1.3rem; margin: 0 0 .25rem; }
h2 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
.sub { color: #57606a; margin-bottom: 1rem; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #eaeef2; font-weight: 600; }
.mono { font-family: ui-monospace, monospace; font-size: 12px; }
.ok { color: #1a7f37; font-weight: 600; }
.bad { color: #cf222e; font-weight: 600; }
.warn { color: #9a6700; font-weight: 600; }
.claim { color: #57606a; font-size: 12px; }
#summary { display: flex; gap: 2rem; background: #fff; border: 1px solid #d0d7de; padding: .75rem 1rem; }
#summary .big { font-size: 1.8rem; font-weight: 700; }
.empty { color: #57606a; font-style: italic; }
`;

const SCRIPT = `
'use strict';
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
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
function short(hex) {
  return hex.length > 16 ? hex.slice(0, 16) + '…' : hex;
}
function replicaRow(r) {
  const tr = document.createElement('tr');
  tr.dataset.replica = String(r.replica);
  tr.dataset.faulty = r.faulty === null ? 'false' : 'true';
  tr.dataset.reachable = r.reachable ? 'true' : 'false';
  const state = r.faulty !== null
    ? td([el('div', 'faulty', 'bad state'), el('div', r.faulty, 'claim reason')])
    : td([el('div', r.reachable ? 'ok' : 'unreachable', (r.reachable ? 'ok' : 'warn') + ' state'),
          r.reachable ? null : el('div', r.connection, 'claim')]);
  const h = r.health;
  const health = 'error' in h
    ? td([el('span', h.error, 'warn')])
    : td([el('div', 'version ' + (h.version ?? '?')),
          el('div', 'up ' + (h.uptimeSeconds === null ? '?' : h.uptimeSeconds + ' s')),
          h.mismatch ? el('div', h.mismatch, 'bad') : null,
          el('div', 'last error: ' + (h.lastError ? h.lastError.at + ' ' + h.lastError.message : 'none'), 'claim')]);
  const m = r.metrics;
  const figures = 'error' in m
    ? td([el('span', m.error, 'warn')])
    : td([el('div', 'grants/s ' + (m.grantsPerSecond === null ? '…' : m.grantsPerSecond.toFixed(2))),
          el('div', 'refusals ' + (Object.entries(m.refusals).map(([k, v]) => k + ' ' + v).join(', ') || 'none')),
          el('div', 'fsync ' + (m.flushMeanMs === null ? '–' : m.flushMeanMs.toFixed(2) + ' ms') + ' (' + m.flushes + ' flushes)')]);
  for (const cell of [el('td', r.replica), td([el('div', r.endpoint, 'mono')]), state, health, figures,
                      el('td', r.leasesListed === null ? '–' : r.leasesListed)]) tr.appendChild(cell);
  return tr;
}
function leaseRow(l) {
  const tr = row([td([el('span', l.resource, 'mono')]), el('td', l.epoch), td([el('span', short(l.holder), 'mono')]),
                  el('td', ms(l.remainingMs)), el('td', l.reportedBy.join(', '))]);
  tr.dataset.resource = l.resource;
  tr.dataset.epoch = l.epoch;
  tr.dataset.holder = l.holder;
  tr.children[2].title = l.holder;
  return tr;
}
function evidenceRow(e) {
  const link = e.downloadable ? el('a', 'download JSON') : el('span', 'not transferable', 'claim');
  if (e.downloadable) {
    link.href = '/api/evidence/' + e.id + '.json';
    link.download = 'equivocation-replica-' + e.replica + '-' + e.id + '.json';
  }
  const tr = row([el('td', e.id), el('td', e.kind), el('td', e.replica), td([el('span', e.resource, 'mono')]),
                  el('td', e.epoch), el('td', e.observedAt), td([link])]);
  tr.dataset.evidence = String(e.id);
  return tr;
}
function render(s) {
  $('cluster').textContent = 'cluster ' + s.cluster.id.slice(0, 16) + '…  ·  n = ' + s.cluster.n + ', f = ' + s.cluster.f +
    ', an acquire needs ' + (2 * s.cluster.f + 1) + '  ·  poll ' + s.polls + (s.polledAt ? ' at ' + s.polledAt : '') +
    (s.lastPollMs === null ? '' : ' (' + s.lastPollMs + ' ms)');
  // Before the first poll there is no margin to show, only the console starting.
  $('margin').textContent = s.polls === 0 ? '…' : String(s.margin);
  $('margin').className = 'big ' + (s.margin > 0 ? 'ok' : s.margin === 0 ? 'warn' : 'bad');
  $('available').textContent = s.available + ' of ' + s.cluster.n;
  $('leaseCount').textContent = String(s.leases.length);
  fill($('replicas'), s.replicas.map(replicaRow), 6, 'no poll yet');
  fill($('leases'), s.leases.map(leaseRow), 5, 'no lease that f+1 replicas confirm');
  fill($('recent'), s.recentGrants.map((g) => row([td([el('span', g.resource, 'mono')]), el('td', g.epoch),
      td([el('span', short(g.holder), 'mono')]), el('td', g.firstSeenAt)])), 4, 'none seen yet');
  fill($('evidence'), s.evidence.map(evidenceRow), 7, 'no evidence');
}
async function poll() {
  try {
    const response = await fetch('/api/state', { cache: 'no-store' });
    if (!response.ok) throw new Error('HTTP ' + response.status);
    render(await response.json());
    $('status').textContent = 'live, updated ' + new Date().toLocaleTimeString();
    $('status').className = 'ok';
  } catch (error) {
    $('status').textContent = 'the console server does not answer: ' + error.message;
    $('status').className = 'bad';
  } finally {
    setTimeout(poll, 1000);
  }
}
poll();
`;

/** The page, with `nonce` on its inline style and script (the server's Content-Security-Policy names it). */
export function consolePage(nonce: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>quorumfence console</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<h1>quorumfence console</h1>
<div class="sub"><span id="cluster">loading…</span> · <span id="status">connecting…</span></div>
<div id="summary">
  <div><div>quorum margin (more replicas that may fail)</div><div id="margin" class="big">–</div></div>
  <div><div>available replicas</div><div id="available" class="big">–</div></div>
  <div><div>running leases</div><div id="leaseCount" class="big">–</div></div>
</div>
<h2>Replicas</h2>
<p class="claim">State is the console's verdict under the (f+1)-th rules; health and figures are each replica's own claim.</p>
<table><thead><tr><th>replica (share index)</th><th>endpoint</th><th>state</th><th>health (its claim)</th><th>figures (its claim)</th><th>leases listed</th></tr></thead>
<tbody id="replicas"></tbody></table>
<h2>Running leases (listed by f+1 replicas)</h2>
<table><thead><tr><th>resource</th><th>epoch</th><th>holder</th><th>time left</th><th>listed by</th></tr></thead>
<tbody id="leases"></tbody></table>
<h2>Recent grants</h2>
<table><thead><tr><th>resource</th><th>epoch</th><th>holder</th><th>first seen</th></tr></thead>
<tbody id="recent"></tbody></table>
<h2>Evidence</h2>
<table><thead><tr><th>id</th><th>kind</th><th>replica</th><th>resource</th><th>epoch</th><th>observed</th><th></th></tr></thead>
<tbody id="evidence"></tbody></table>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>
`;
}
