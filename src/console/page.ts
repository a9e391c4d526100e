/**
 * The console's one page: self-contained (inline style and script, no external link), polling /api/state
 * every second. Every value from the state (much of it replicas' words) reaches the page through
 * textContent or an attribute set by the DOM API, never as HTML, so a lying replica cannot inject markup;
 * the Content-Security-Policy the server sends allows only this page's own inline script and style (by
 * nonce) and requests to its own origin. The script is page-script.ts. The runbooks (runbooks.ts) are the
 * console's own text, written into the document here, so they read even when the console stops answering.
 *
 * Top to bottom, what an operator paged at night needs first: the status line (what is true, since when, what to
 * do), the tiles, the replicas worst first, then the charts, alerts, leases, evidence and the runbooks. It fits a
 * 390 px wide phone: tables scroll inside their own box, charts shrink to the width.
 */
import { PAGE_SCRIPT } from './page-script.js';
import { RUNBOOKS } from './runbooks.js';

const STYLE = `
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1b1f24; background: #f6f8fa; }
h1 { font-size: 1.3rem; margin: 0 0 .25rem; }
h2 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
h3 { font-size: .95rem; margin: .75rem 0 .25rem; }
.sub { color: #57606a; margin-bottom: .75rem; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; background: #fff; }
/* Narrower than this, a table scrolls inside its box rather than squeeze its columns to a word each. */
table.wide { min-width: 52rem; }
table.medium { min-width: 34rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #eaeef2; font-weight: 600; }
.mono { font-family: ui-monospace, monospace; font-size: 12px; overflow-wrap: anywhere; }
.ok { color: #1a7f37; font-weight: 600; }
.bad { color: #cf222e; font-weight: 600; }
.warn { color: #9a6700; font-weight: 600; }
.claim { color: #57606a; font-size: 12px; }
.reason { overflow-wrap: anywhere; max-width: 30rem; }
.state-cell { min-width: 13rem; }
.endpoint { white-space: nowrap; overflow-wrap: normal; }
.figures { min-width: 12rem; }
.down-since { color: #9a6700; font-size: 12px; }
#situation { border: 1px solid #d0d7de; border-left-width: 6px; background: #fff; padding: .6rem .9rem; margin-bottom: 1rem; }
#situation[data-status="healthy"] { border-left-color: #1a7f37; }
#situation[data-status="degraded"] { border-left-color: #bf8700; background: #fff8c5; }
#situation[data-status="unavailable"] { border-left-color: #cf222e; background: #ffebe9; }
#headline { font-size: 1.1rem; margin: 0 0 .2rem; }
#situation ul, #situation ol { margin: .3rem 0 0; padding-left: 1.3rem; }
#situation li { margin: .15rem 0; overflow-wrap: anywhere; }
#actions-title { font-weight: 600; margin: .5rem 0 0; }
#summary { display: flex; gap: .75rem; flex-wrap: wrap; }
.tile { background: #fff; border: 1px solid #d0d7de; padding: .6rem .9rem; flex: 1 1 11rem; min-width: 0; }
.tile .big { font-size: 1.7rem; font-weight: 700; }
.tile .note { font-size: 12px; }
#charts { display: flex; gap: .75rem; flex-wrap: wrap; }
.chart { margin: 0; background: #fff; border: 1px solid #d0d7de; padding: .5rem; flex: 1 1 20rem; min-width: 0; max-width: 34rem; }
.chart svg { display: block; width: 100%; height: auto; }
.chart figcaption { font-size: 12px; color: #57606a; }
.chart .axis { stroke: #8c959f; stroke-width: 1; }
.chart .grid { stroke: #eaeef2; stroke-width: 1; }
.chart .tick { font-size: 10px; fill: #57606a; }
.chart .gap { fill: #eaeef2; }
.chart .gap-label { font-size: 10px; fill: #8c959f; }
.chart .line { fill: none; stroke-width: 1.5; }
.chart .dot { fill: currentColor; stroke: none; }
.chart .hit { fill: transparent; stroke: none; }
.chart .hit:hover { fill: rgba(9, 105, 218, .12); }
.s0 { stroke: #0969da; color: #0969da; } .s1 { stroke: #cf222e; color: #cf222e; } .s2 { stroke: #9a6700; color: #9a6700; }
.s3 { stroke: #8250df; color: #8250df; } .s4 { stroke: #1a7f37; color: #1a7f37; } .s5 { stroke: #57606a; color: #57606a; }
.empty { color: #57606a; font-style: italic; }
.notice { background: #fff8c5; border: 1px solid #d4a72c; padding: .4rem .6rem; margin: 0 0 .5rem; overflow-wrap: anywhere; }
.notice[hidden] { display: none; }
#runbooks article { background: #fff; border: 1px solid #d0d7de; padding: .2rem .9rem .5rem; margin-bottom: .5rem; }
#runbooks article:target { border-color: #0969da; box-shadow: 0 0 0 2px #0969da33; }
#runbooks ol { margin: .2rem 0; padding-left: 1.3rem; }
body[data-stale="true"] .tile, body[data-stale="true"] .chart, body[data-stale="true"] table,
body[data-stale="true"] #situation {
  background: #eaeef2; filter: grayscale(1); opacity: .6;
}
body[data-stale="true"] .tile .big, body[data-stale="true"] td .ok, body[data-stale="true"] td .warn,
body[data-stale="true"] td .bad, body[data-stale="true"] #headline { color: #8c959f; }
#status.bad { display: inline-block; background: #ffebe9; padding: 0 .4rem; }
@media (max-width: 600px) {
  body { margin: .5rem; }
  h1 { font-size: 1.1rem; }
  .tile { flex: 1 1 40%; padding: .4rem .6rem; }
  .tile .big { font-size: 1.3rem; }
  th, td { padding: .2rem .3rem; }
  .figures { min-width: 9rem; }
}
`;

const ESCAPES: Readonly<Record<string, string>> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' };

/** Text for HTML (the runbooks are the console's own words, escaped all the same). */
function escapeHtml(text: string): string {
  return text.replace(/[&<>"]/g, (c) => ESCAPES[c]!);
}

function runbooksHtml(): string {
  return RUNBOOKS.map(
    (r) =>
      `<article id="runbook-${r.id}"><h3>${escapeHtml(r.title)}</h3><ol>${r.steps
        .map((step) => `<li>${escapeHtml(step)}</li>`)
        .join(
          '',
        )}</ol><p class="claim">More: ${escapeHtml(r.docs.file)}, section ${escapeHtml(r.docs.heading.replace(/`/g, ''))} (the docs ship with the package).</p></article>`,
  ).join('\n');
}

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
<body data-stale="false">
<h1>quorumfence console</h1>
<div class="sub"><span id="cluster">loading…</span> · all times UTC · <span id="status">connecting…</span></div>
<section id="situation" data-status="starting" aria-live="polite">
  <p id="headline">Waiting for the console’s first poll…</p>
  <div id="status-since" class="claim"></div>
  <ul id="reasons"></ul>
  <p id="actions-title" hidden>What to do</p>
  <ol id="actions"></ol>
</section>
<div id="summary">
  <div class="tile" id="tile-margin"><div>quorum margin (more replicas that may fail)</div><div id="margin" class="big">–</div></div>
  <div class="tile" id="tile-available"><div>available replicas</div><div id="available" class="big">–</div></div>
  <div class="tile" id="tile-leases"><div>running leases</div><div id="leaseCount" class="big">–</div><div id="leaseNote" class="note"></div></div>
  <div class="tile" id="tile-alerts"><div>alerts</div><div id="alertCount" class="big">–</div><div id="alertPending" class="note"></div></div>
</div>
<h2>Replicas (worst first)</h2>
<p class="claim">State is the console’s verdict: faulty only on proof; hung when its connection is open but it does not answer; down when its connection is refused or closed. Health, figures and store are each replica’s own claim.</p>
<div class="scroll"><table class="wide"><thead><tr><th>replica</th><th>state</th><th>endpoint</th><th>health (its claim)</th><th>figures (its claim)</th><th>store (its claim)</th><th>leases listed</th></tr></thead>
<tbody id="replicas"></tbody></table></div>
<h2>Last 15 minutes</h2>
<p id="history-note" class="claim"></p>
<div id="charts"></div>
<h2>Alerts (the shipped rules, evaluated on what the console sees)</h2>
<div class="scroll"><table class="medium"><thead><tr><th>alert</th><th>severity</th><th>state</th><th>where</th></tr></thead>
<tbody id="alerts"></tbody></table></div>
<h2>Running leases (listed by f+1 replicas)</h2>
<p id="leases-cut" class="notice" hidden></p>
<div class="scroll"><table class="medium"><thead><tr><th>resource</th><th>epoch</th><th>holder</th><th>time left</th><th>listed by</th><th>renewal</th></tr></thead>
<tbody id="leases"></tbody></table></div>
<section id="watched-section" hidden>
<h2>Watched resources (--watch, asked at every poll)</h2>
<div class="scroll"><table class="medium"><thead><tr><th>resource</th><th>lease (f+1 replicas say)</th><th>epoch</th><th>time left</th><th>answered</th><th>in the lease table</th></tr></thead>
<tbody id="watched"></tbody></table></div>
</section>
<h2>Recent grants</h2>
<div class="scroll"><table><thead><tr><th>resource</th><th>epoch</th><th>holder</th><th>first seen</th></tr></thead>
<tbody id="recent"></tbody></table></div>
<h2>Evidence</h2>
<p class="claim">Every proof the console holds, as a JSON document. An equivocation convinces anyone holding cluster.json; the others are the console’s record of what the replica answered.</p>
<div class="scroll"><table class="wide"><thead><tr><th>id</th><th>kind</th><th>replica</th><th>what it shows</th><th>resource, epoch</th><th>observed</th><th></th></tr></thead>
<tbody id="evidence"></tbody></table></div>
<section id="runbooks">
<h2>Runbooks</h2>
${runbooksHtml()}
</section>
<script nonce="${nonce}">${PAGE_SCRIPT}</script>
</body>
</html>
`;
}
