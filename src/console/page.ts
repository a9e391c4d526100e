/**
 * The console's one page: self-contained (inline style and script, no external link), polling /api/state
 * every second. Every value from the state (much of it replicas' words) reaches the page through
 * textContent or an attribute set by the DOM API, never as HTML, so a lying replica cannot inject markup;
 * the Content-Security-Policy the server sends allows only this page's own inline script and style (by
 * nonce) and requests to its own origin. The script is page-script.ts.
 */
import { PAGE_SCRIPT } from './page-script.js';

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
.down-since { color: #9a6700; font-size: 12px; }
#summary { display: flex; gap: 1rem; flex-wrap: wrap; }
.tile { background: #fff; border: 1px solid #d0d7de; padding: .75rem 1rem; min-width: 11rem; }
.tile .big { font-size: 1.8rem; font-weight: 700; }
#charts { display: flex; gap: 1rem; flex-wrap: wrap; }
.chart { margin: 0; background: #fff; border: 1px solid #d0d7de; padding: .5rem; }
.chart figcaption { font-size: 12px; color: #57606a; }
.chart .axis { stroke: #d0d7de; stroke-width: 1; }
.chart .tick { font-size: 10px; fill: #57606a; }
.chart .line { fill: none; stroke-width: 1.5; }
.chart .dot { fill: currentColor; stroke: none; }
.s0 { stroke: #0969da; color: #0969da; } .s1 { stroke: #cf222e; color: #cf222e; } .s2 { stroke: #9a6700; color: #9a6700; }
.s3 { stroke: #8250df; color: #8250df; } .s4 { stroke: #1a7f37; color: #1a7f37; } .s5 { stroke: #57606a; color: #57606a; }
.empty { color: #57606a; font-style: italic; }
body[data-stale="true"] .tile, body[data-stale="true"] .chart, body[data-stale="true"] table {
  background: #eaeef2; filter: grayscale(1); opacity: .6;
}
body[data-stale="true"] .tile .big, body[data-stale="true"] td .ok, body[data-stale="true"] td .warn,
body[data-stale="true"] td .bad { color: #8c959f; }
#status.bad { display: inline-block; background: #ffebe9; padding: 0 .4rem; }
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
<body data-stale="false">
<h1>quorumfence console</h1>
<div class="sub"><span id="cluster">loading…</span> · all times UTC · <span id="status">connecting…</span></div>
<div id="summary">
  <div class="tile" id="tile-margin"><div>quorum margin (more replicas that may fail)</div><div id="margin" class="big">–</div></div>
  <div class="tile" id="tile-available"><div>available replicas</div><div id="available" class="big">–</div></div>
  <div class="tile" id="tile-leases"><div>running leases</div><div id="leaseCount" class="big">–</div></div>
  <div class="tile" id="tile-alerts"><div>alerts that would fire</div><div id="alertCount" class="big">–</div></div>
</div>
<h2>Last 15 minutes</h2>
<div id="charts"></div>
<h2>Alerts (the shipped rules, evaluated on what the console sees)</h2>
<table><thead><tr><th>alert</th><th>severity</th><th>state</th><th>where</th></tr></thead>
<tbody id="alerts"></tbody></table>
<h2>Replicas</h2>
<p class="claim">State is the console's verdict: faulty only on proof, unreachable when it does not answer. Health, figures and store are each replica's own claim.</p>
<table><thead><tr><th>replica (share index)</th><th>endpoint</th><th>state</th><th>health (its claim)</th><th>figures (its claim)</th><th>store (its claim)</th><th>leases listed</th></tr></thead>
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
<script nonce="${nonce}">${PAGE_SCRIPT}</script>
</body>
</html>
`;
}
