// The view's page: merges the records the server streams (kind -> key -> record) and draws the run at
// the time the slider shows (the newest, while "follow the run" is on). Read-only: it only listens.
"use strict";

const R = {};                      // kind -> key -> record, as testbed/view/state.py puts them
let ended = false, drawn = false, pending = false;
const follow = document.getElementById("follow"), slider = document.getElementById("slider");
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];
const MARK_ROWS = {move: 0.97, migration: 0.91, "failed migration": 0.91, violation: 0.85, handover: 0.79,
                   "early round": 0.79, fault: 0.73, election: 0.73, "round failed": 0.73, "group change": 0.67};
const MARK_STYLE = {move: ["#555", "line-ns"], migration: ["#2e8b57", "triangle-right"],
                    "failed migration": ["#c0392b", "x"], violation: ["#c0392b", "triangle-down"],
                    handover: ["#2f6fb0", "diamond"], "early round": ["#2f6fb0", "diamond-open"],
                    fault: ["#000", "x"], election: ["#000", "star"], "round failed": ["#c0392b", "star"],
                    "group change": ["#999", "circle-open"]};

const CONFIG = {displaylogo: false, responsive: true};

// Room for everything a plot draws beside its data: each axis grows its margin to fit its tick labels
// and, set off from them, its title (automargin, standoff); the toolbar has the top margin to itself,
// above the plot; a legend sits under the x axis title, in a bottom margin made for it.
function frame(layout, {legendRows = 0} = {}) {
  const axes = Object.keys(layout).filter(k => /^[xy]axis\d*$/.test(k));
  axes.forEach(k => { layout[k] = Object.assign({automargin: true}, layout[k]);
                      if (layout[k].title) layout[k].title = Object.assign({standoff: 6}, layout[k].title); });
  layout.margin = {l: 8, r: 12, t: 30, b: 8 + 22 * legendRows};
  if (legendRows) layout.legend = {orientation: "h", x: 0, xanchor: "left", y: 0, yanchor: "bottom", yref: "container"};
  return layout;
}

const values = kind => Object.values(R[kind] || {});
const one = (kind, key) => (R[kind] || {})[key];

const dirty = new Set();          // kinds changed since the last drawing: a plot whose inputs did not change is not redrawn
function merge(records) {
  for (const [kind, recs] of Object.entries(records)) { R[kind] = Object.assign(R[kind] || {}, recs); dirty.add(kind); }
}

function origin() {             // the workload's start: times on the page are seconds since then
  const meta = one("run", "meta");
  return one("run", "start") || (meta && meta.started) || 0;
}

function timeRange() {
  const t0 = origin();
  let lo = 0, hi = 0;
  const seen = t => { lo = Math.min(lo, t - t0); hi = Math.max(hi, t - t0); };
  values("latency").forEach(r => seen(r[1] + 1));
  values("mark").forEach(r => { seen(r[0]); if (r[1]) seen(r[1]); });
  values("owner").forEach(r => seen(r[0]));
  values("guard").forEach(r => seen(r[0] + 1));
  const end = one("run", "end");
  if (end) hi = Math.max(hi, end - t0);
  return [Math.floor(lo), Math.ceil(hi * 10) / 10];
}

function shownTime() {
  const [lo, hi] = timeRange();
  slider.min = lo; slider.max = hi;
  if (follow.checked) slider.value = hi;
  return Math.min(hi, Math.max(lo, parseFloat(slider.value)));
}

// -- the state at time T ---------------------------------------------------------------------------------
function sitesAt(T) {           // node -> site: the plan's initial site, then every recorded move up to T
  const graph = one("topology", "graph"), t0 = origin(), at = {};
  graph.nodes.forEach(n => { at[n.name] = n.site; });
  values("move").sort((a, b) => a[0] - b[0]).forEach(m => { if (m[0] - t0 <= T) at[m[1]] = m[3]; });
  return at;
}

function ownersAt(T) {          // topic -> [broker, since]: the newest acquire up to T
  const t0 = origin(), owners = {};
  values("owner").sort((a, b) => a[0] - b[0]).forEach(o => { if (o[0] - t0 <= T) owners[o[1]] = [o[2], o[0] - t0]; });
  return owners;
}

// -- drawing -----------------------------------------------------------------------------------------------
function ring(center, radius, k, n, phase) {
  const angle = phase + 2 * Math.PI * k / Math.max(1, n);
  return [center.x + radius * Math.cos(angle), center.y + radius * Math.sin(angle)];
}

function topologyTraces(T) {
  const graph = one("topology", "graph"), where = sitesAt(T), owners = ownersAt(T);
  const site = Object.fromEntries(graph.sites.map(s => [s.name, s]));
  const span = graph.span, traces = [];
  for (const kind of ["site", "cloud"]) {
    const x = [], y = [];
    graph.links.filter(l => l.kind === kind).forEach(l => {
      x.push(site[l.a].x, site[l.b].x, null); y.push(site[l.a].y, site[l.b].y, null);
    });
    traces.push({x, y, mode: "lines", name: kind === "site" ? "site links" : "cloud links", hoverinfo: "skip",
                 visible: x.length ? true : false,
                 line: {color: kind === "site" ? "#9aa" : "#8ab4e0", width: 1.5, dash: kind === "site" ? "solid" : "dot"}});
  }
  traces.push(linkLabels(graph, site));
  traces.push({x: graph.sites.map(s => s.x), y: graph.sites.map(s => s.y), mode: "markers+text", name: "sites",
               text: graph.sites.map(s => s.name + cloudDelays(graph, s.name)), textposition: "bottom center",
               marker: {size: 26, color: "#e6edf5", line: {color: "#7a8ea6", width: 1.5}},
               hovertext: graph.sites.map(s => `site ${s.name} (${s.kind})`), hoverinfo: "text"});
  const infra = graph.nodes.filter(n => !isClient(n)), clients = graph.nodes.filter(isClient);
  const topicsOf = b => Object.entries(owners).filter(([, o]) => o[0] === b).map(([t]) => t);
  const place = (list, radius, phase) => list.map(n => {
    const here = list.filter(m => where[m.name] === where[n.name]);
    return ring(site[where[n.name]], radius * span, here.indexOf(n), here.length, phase);
  });
  const infraXY = place(infra, 0.035, Math.PI / 2);
  traces.push({x: infraXY.map(p => p[0]), y: infraXY.map(p => p[1]), mode: "markers", name: "brokers, NC proxies",
               marker: {size: infra.map(n => n.role === "broker" || n.role === "cloud" ? 11 + 2 * Math.min(6, topicsOf(n.name).length) : 8),
                        symbol: infra.map(n => ({broker: "square", cloud: "square", "nc-proxy": "diamond"})[n.role] || "circle"),
                        color: infra.map(n => n.role === "nc-proxy" ? "#b0b8c4" : "#34495e")},
               hovertext: infra.map(n => `${n.role} ${n.name}` + (topicsOf(n.name).length ? `: owns ${topicsOf(n.name).join(", ")}` : "")),
               hoverinfo: "text"});
  const clientXY = place(clients, 0.085, 0);
  traces.push({x: clientXY.map(p => p[0]), y: clientXY.map(p => p[1]), mode: "markers+text", name: "clients",
               ids: clients.map(n => n.name), text: clients.map(n => clients.length <= 16 ? n.name : ""),
               textposition: clientXY.map((p, i) => (p[0] >= site[where[clients[i].name]].x ? "middle right" : "middle left")),
               textfont: {size: 10},
               marker: {size: clients.map(n => n.mobile ? 13 : 8), color: clients.map((n, i) => COLORS[i % COLORS.length]),
                        symbol: clients.map(n => n.mobile ? "circle" : "circle-open")},
               hovertext: clients.map(n => `${n.role} ${n.name} at ${where[n.name]}` + (n.members > 1 ? ` (${n.members} members)` : "")),
               hoverinfo: "text"});
  return traces;
}

// A link's one-way delay is written at its middle unless it would cover another label or a marker there
// (links that meet at a site pile up); then a third of the way to either end; else only in its hover.
const LABEL_AT = [0.5, 0.3, 0.7];
let labelAt = {}, placing = 0, placed = 0;    // link index -> fraction along it (null: hover only); placements done

function linkLabels(graph, site) {
  const labelled = graph.links.filter(l => l.kind === "site").length <= 30;  // cloud links: in their hover
  const at = graph.links.map((l, i) => (i in labelAt ? labelAt[i] : LABEL_AT[0]));
  const along = (l, f, c) => site[l.a][c] + (site[l.b][c] - site[l.a][c]) * (f ?? LABEL_AT[0]);
  return {x: graph.links.map((l, i) => along(l, at[i], "x")), y: graph.links.map((l, i) => along(l, at[i], "y")),
          mode: "markers+text", marker: {size: 4, color: "#9aa"},
          text: graph.links.map((l, i) => (labelled && l.kind === "site" && at[i] !== null ? `${l.delay_ms.toFixed(1)} ms` : "")),
          hovertext: graph.links.map(l => `${l.a} - ${l.b}: ${l.delay_ms.toFixed(2)} ms one-way`),
          hoverinfo: "text", textfont: {size: 10, color: "#678"}, name: "link delays"};
}

function crowdedLinkLabels(div) {  // links whose written delay covers another label or a site's, node's or client's marker
  const box = el => el.getBoundingClientRect(), gap = 2;   // px kept clear around a label
  const hit = (a, b) => a.left - gap < b.right && b.left < a.right + gap && a.top - gap < b.bottom && b.top < a.bottom + gap;
  const groups = [...div.querySelectorAll(".scatterlayer .trace")];
  const links = groups.find(g => g.__data__[0].trace.name === "link delays");
  if (!links) return [];
  const taken = groups.filter(g => g !== links).flatMap(g => [...g.querySelectorAll(".textpoint text, path.point")])
    .map(box).filter(b => b.width && b.height);
  const dots = [...links.querySelectorAll("path.point")].map(p => [p.__data__.i, box(p)]);
  const crowded = [];
  links.querySelectorAll(".textpoint").forEach(point => {
    const text = point.querySelector("text"), i = point.__data__.i;
    if (!text || !text.textContent) return;
    const b = box(text), others = dots.filter(([j]) => j !== i).map(([, d]) => d);  // its own dot is under it
    if (taken.some(t => hit(b, t)) || others.some(d => hit(b, d))) crowded.push(i); else taken.push(b);
  });
  return crowded;
}

async function placeLinkLabels(div) {
  const mine = ++placing;
  for (let pass = 0; pass < LABEL_AT.length && mine === placing; pass++) {
    const crowded = crowdedLinkLabels(div);
    if (!crowded.length) break;
    crowded.forEach(i => { labelAt[i] = LABEL_AT[LABEL_AT.indexOf(i in labelAt ? labelAt[i] : LABEL_AT[0]) + 1] ?? null; });
    const graph = one("topology", "graph"), site = Object.fromEntries(graph.sites.map(s => [s.name, s]));
    const t = linkLabels(graph, site);
    await Plotly.restyle(div, {x: [t.x], y: [t.y], text: [t.text]}, [div.data.findIndex(d => d.name === "link delays")]);
  }
  if (mine === placing) placed += 1;
}

function cloudDelays(graph, name) {   // "clouddc · 40 ms one-way": its links' delays, said once
  if (!graph.sites.some(s => s.name === name && s.kind === "cloud")) return "";
  const delays = [...new Set(graph.links.filter(l => l.kind === "cloud" && (l.a === name || l.b === name)).map(l => l.delay_ms.toFixed(1)))];
  return delays.length ? ` · ${delays.join("/")} ms one-way` : "";
}

function isClient(n) { return !["cloud", "broker", "nc-proxy", "storage", "star"].includes(n.role); }

async function drawTopology(T) {
  labelAt = {};                   // the labels are placed again around what moved
  const div = document.getElementById("topology"), traces = topologyTraces(T);
  const layout = frame({showlegend: false, hovermode: "closest",
                        xaxis: {title: {text: "longitude (°)"}, zeroline: false}, yaxis: {title: {text: "latitude (°)"}, zeroline: false, scaleanchor: "x"}});
  if (!div.data) { await Plotly.newPlot(div, traces, layout, CONFIG); return placeLinkLabels(div); }
  const last = traces.length - 1, before = div.data[last];
  const moved = before.x.some((x, i) => Math.abs(x - traces[last].x[i]) > 1e-9 || Math.abs(before.y[i] - traces[last].y[i]) > 1e-9);
  await Plotly.react(div, traces.map((t, i) => (i === last && moved ? Object.assign({}, t, {x: before.x, y: before.y}) : t)), layout);
  if (moved) await Plotly.animate(div, {data: [{x: traces[last].x, y: traces[last].y}], traces: [last]},
                                  {transition: {duration: 700, easing: "cubic-in-out"}, frame: {duration: 700, redraw: false}});
  return placeLinkLabels(div);
}

function settled(kind) {        // while the run goes on, its newest second is still filling: not drawn yet
  const rows = values(kind), meta = one("run", "meta") || {};
  if (meta.status !== "running" || ended) return rows;
  const newest = Math.max(...rows.map(r => r[1]));
  return rows.filter(r => r[1] < newest);
}

function drawLatency(T) {
  const t0 = origin(), byTopic = {};
  settled("latency").forEach(r => { (byTopic[r[0]] = byTopic[r[0]] || []).push(r); });
  const topics = Object.keys(byTopic).sort(), traces = [];
  topics.forEach((topic, i) => {
    const rows = byTopic[topic].sort((a, b) => a[1] - b[1]);
    traces.push({x: rows.map(r => r[1] + 0.5 - t0), y: rows.map(r => r[4]), mode: "lines", name: topic,
                 line: {width: 1.3, color: COLORS[i % COLORS.length]},
                 customdata: rows.map(r => [r[2], r[3].toFixed(1), r[5].toFixed(1)]),
                 hovertemplate: `${topic}<br>%{x:.0f} s: p95 %{y:.1f} ms, p50 %{customdata[1]} ms, max %{customdata[2]} ms, %{customdata[0]} messages<extra></extra>`});
  });
  const byKind = {};
  values("mark").forEach(m => { (byKind[m[2]] = byKind[m[2]] || []).push(m); });
  for (const [kind, marks] of Object.entries(byKind)) {
    const [color, symbol] = MARK_STYLE[kind] || ["#555", "circle"];
    traces.push({x: marks.map(m => m[0] - t0), y: marks.map(() => MARK_ROWS[kind] || 0.6), yaxis: "y2", mode: "markers",
                 name: kind + "s", marker: {color, symbol, size: 8, line: {width: 1.5, color}},
                 hovertext: marks.map(m => `${kind} at ${(m[0] - t0).toFixed(2)} s` + (m[1] ? ` (until ${(m[1] - t0).toFixed(2)} s)` : "") + `: ${m[3]}`),
                 hoverinfo: "text"});
  }
  const shapes = values("mark").filter(m => m[1] && m[2].endsWith("migration")).map(m => ({
    type: "rect", xref: "x", yref: "paper", x0: m[0] - t0, x1: m[1] - t0, y0: 0, y1: 1, name: "migration",
    fillcolor: m[2] === "migration" ? "#2e8b57" : "#c0392b", opacity: 0.12, line: {width: 0}}));
  values("mark").filter(m => m[2] === "move").forEach(m => shapes.push({type: "line", xref: "x", yref: "paper", name: "move",
    x0: m[0] - t0, x1: m[0] - t0, y0: 0, y1: 1, line: {color: "#888", width: 1, dash: "dot"}}));
  const plan = one("run", "plan") || {thresholds_ms: {}}, annotations = [];
  const byValue = {};           // classes that share a threshold share its line
  Object.entries(plan.thresholds_ms).forEach(([name, ms]) => { (byValue[ms] = byValue[ms] || []).push(name); });
  Object.entries(byValue).forEach(([ms, names]) => {
    shapes.push({type: "line", xref: "paper", x0: 0, x1: 1, y0: +ms, y1: +ms, name: "threshold", line: {color: "#c0392b", width: 1.5, dash: "dash"}});
    annotations.push({xref: "paper", x: 0.005, y: +ms, yanchor: "bottom", xanchor: "left", showarrow: false,
                      text: `threshold ${(+ms).toFixed(0)} ms (${names.join(", ")})`, font: {size: 10, color: "#c0392b"}});
  });
  shapes.push(cursorAt(T));
  const layout = frame({shapes, annotations, hovermode: "closest",
                        xaxis: {title: {text: "time since the workload started (s)"}, range: timeRange()},
                        yaxis: {title: {text: "latency, p95 per second (ms)"}, rangemode: "tozero", domain: [0, 0.74]},
                        // the marks have a lane of their own above the latencies, not on them
                        yaxis2: {domain: [0.76, 1], anchor: "x", range: [0.62, 1.02], visible: false, fixedrange: true}},
                       {legendRows: 2});
  Plotly.react("latency", traces, layout, CONFIG);
}

function cursorAt(T) {             // following the run, the time shown is the plots' right edge: no cursor
  if (follow.checked) return {type: "line", xref: "x", yref: "paper", x0: T, x1: T, y0: 0, y1: 0, name: "shown time", visible: false};
  return {type: "line", xref: "x", yref: "paper", x0: T, x1: T, y0: 0, y1: 1, name: "shown time", line: {color: "#2f6fb0", width: 2}};
}

function drawLoad(T) {
  const t0 = origin(), byBroker = {};
  settled("load").forEach(r => { (byBroker[r[0]] = byBroker[r[0]] || []).push(r); });
  const traces = Object.keys(byBroker).sort().map((broker, i) => {
    const rows = byBroker[broker].sort((a, b) => a[1] - b[1]);
    return {x: rows.map(r => r[1] + 0.5 - t0), y: rows.map(r => r[2]), mode: "lines", name: broker,
            line: {width: 1.3, color: COLORS[i % COLORS.length]}};
  });
  Plotly.react("load", traces, frame({shapes: [cursorAt(T)], xaxis: {title: {text: "time (s)"}, range: timeRange()},
                                      yaxis: {title: {text: "deliveries/s"}, rangemode: "tozero"}}, {legendRows: 1}), CONFIG);
}

function drawGuard(T) {
  const t0 = origin(), rows = values("guard").sort((a, b) => a[0] - b[0]);
  const color = {ok: "#2e8b57", steal: "#d98c1f", saturated: "#c0392b"};
  const traces = ["ok", "steal", "saturated"].map(verdict => {
    const mine = rows.filter(r => r[1] === verdict);
    return {type: "bar", x: mine.map(r => r[0] + 0.5 - t0), y: mine.map(() => 1), name: {ok: "valid", steal: "late, by the hypervisor (steal, or a stalled VM)", saturated: "saturated (the harness's own load)"}[verdict],
            marker: {color: color[verdict]}, width: 1,
            hovertext: mine.map(r => `${(r[0] - t0).toFixed(0)} s: ${r[1]}` + (r[2].length ? ` (${r[2].join(", ")})` : "") + `, steal ${r[3] ?? "-"} ms, VM stalled ${r[5] ?? "-"} ms`),
            hoverinfo: "text"};
  });
  Plotly.react("guard", traces, frame({barmode: "stack", bargap: 0, shapes: [cursorAt(T)],
                                       xaxis: {title: {text: "time (s)"}, range: timeRange()},
                                       yaxis: {visible: false, range: [0, 1]}}, {legendRows: 3}), CONFIG);
}

const fmt = {messages: v => String(v), p50_ms: v => v.toFixed(1), p95_ms: v => v.toFixed(1), max_ms: v => v.toFixed(1),
             threshold_ms: v => (v == null ? "-" : v.toFixed(0)), violation_ratio: v => (v == null ? "-" : (100 * v).toFixed(2) + " %")};

function drawTables(T) {
  const owners = ownersAt(T), moved = new Set(values("mark").filter(m => m[2] === "migration").map(m => m[3].split(":")[0]));
  document.querySelector("#owners tbody").innerHTML = Object.keys(owners).sort().map(topic =>
    `<tr data-topic="${esc(topic)}" class="${moved.has(topic) ? "moved" : ""}"><td>${esc(topic)}</td><td class="broker">${esc(owners[topic][0])}</td>` +
    `<td>${owners[topic][1].toFixed(1)}</td></tr>`).join("");
  const classes = one("totals", "classes") || {};
  document.querySelector("#summary tbody").innerHTML = Object.entries(classes).map(([name, c]) =>
    `<tr data-class="${esc(name)}"><td>${esc(name)}</td>` + Object.keys(fmt).map(f => `<td data-field="${f}">${fmt[f](c[f])}</td>`).join("") + "</tr>").join("");
  const n = one("totals", "counts") || {};
  document.getElementById("counts").innerHTML =
    `deliveries <b id="count-deliveries">${n.deliveries ?? 0}</b>, migrations <b id="count-migrations">${n.migrations ?? 0}</b> ` +
    `(failed <b id="count-migrations-failed">${n.migrations_failed ?? 0}</b>), violations detected <b id="count-violations">${n.violations_detected ?? 0}</b>`;
  const recorded = one("summary", "recorded"), note = document.getElementById("recorded");
  if (!recorded) { note.textContent = "summary.json: not written yet (the run writes it at its end)"; note.className = "note"; return; }
  if (!recorded.classes) { note.textContent = "summary.json has no latency per topic class (this system's end screen differs)"; note.className = "note"; return; }
  const counted = ["migrations", "violations_detected"].filter(k => k in recorded);
  const same = Object.keys(fmt).every(f => Object.entries(recorded.classes).every(([k, c]) => classes[k] && fmt[f](classes[k][f]) === fmt[f](c[f])))
               && Object.keys(classes).length === Object.keys(recorded.classes).length && counted.every(k => recorded[k] === n[k]);
  note.textContent = same ? "equal to the run's summary.json" : "differs from the run's summary.json (see the end screen)";
  note.className = "note " + (same ? "equal" : "differ");
}

function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]); }

function drawHeader(T) {
  const meta = one("run", "meta") || {}, plan = one("run", "plan") || {};
  document.getElementById("run-dir").textContent = one("run", "dir") || "-";
  document.getElementById("run-name").textContent = `${meta.scenario || plan.scenario || "?"} · run ${meta.run_id || "?"}` +
    (meta.backend ? ` · ${meta.backend}, shaper ${meta.shaper}` : "");
  const status = document.getElementById("run-status"), word = ended && meta.status === "running" ? "view stopped" : (meta.status || "-");
  status.textContent = word; status.className = "badge " + ({running: "running", finished: "finished"}[word] || "early");
  document.getElementById("clock").textContent = `t = ${T.toFixed(1)} s` + (plan.duration_s ? ` of ${plan.duration_s} s` : "");
  document.getElementById("slider-label").textContent = `${T.toFixed(1)} s`;
  const rows = values("guard").filter(r => r[0] - origin() <= T).sort((a, b) => a[0] - b[0]), last = rows[rows.length - 1];
  const guard = document.getElementById("guard-status");
  // the run's validity up to the slider (testbed.health.validity, computed by the server), then the second's own causes
  guard.textContent = last ? `guard: ${last[6] || "?"}` + (last[1] === "ok" ? "" : ` (now ${last[1]}` +
    (last[2].length ? ": " + last[2].join(", ") : "") + ")") : "guard: not judging yet";
  const judged = rows.length, valid = rows.filter(r => r[1] === "ok").length;
  guard.className = "badge " + (!last ? "" : valid === judged ? "ok" : last[1] === "ok" ? "steal" : last[1]);
  const problems = Object.values(R.problem || {});
  const said = {killed: "this run ended without recording its end (killed?)", "ended early": "this run ended early" +
                (meta.interrupted ? ` (interrupted by ${meta.interrupted})` : "") + (meta.stopped ? ` (${meta.stopped})` : "")}[meta.status];
  if (said) problems.push(said + ": showing what it recorded");
  if (!one("topology", "graph") && !problems.length) problems.push("no topology yet");
  document.getElementById("problems").innerHTML = problems.map(p => `<div>${esc(p)}</div>`).join("");
}

let lastT = null, lastScene = null;
function render() {
  pending = false;
  const T = shownTime(), moved = T !== lastT && !follow.checked, changed = k => moved || dirty.has(k) || !drawn;
  drawHeader(T);
  if (one("topology", "graph")) {
    const scene = JSON.stringify([sitesAt(T), ownersAt(T)]);   // the map changes only with a move or an owner
    if (scene !== lastScene || !drawn) drawTopology(T);
    lastScene = scene;
  }
  if (changed("latency") || changed("mark") || changed("run")) drawLatency(T);
  if (changed("load")) drawLoad(T);
  if (changed("guard")) drawGuard(T);
  drawTables(T);
  dirty.clear(); lastT = T;
  drawn = true;
  window.tbView.shown = T;
}

function schedule() { if (!pending) { pending = true; requestAnimationFrame(render); } }

window.tbView = {records: R, sitesAt, ownersAt, origin, get ended() { return ended; }, get drawn() { return drawn; },
                 get labelsPlaced() { return placed; }};
let resized = null;              // a resized window has the map drawn again, its link labels placed for the new size
window.addEventListener("resize", () => { clearTimeout(resized); resized = setTimeout(() => { lastScene = null; schedule(); }, 300); });
slider.addEventListener("input", () => { follow.checked = false; schedule(); });
follow.addEventListener("change", () => { lastT = null; dirty.add("latency"); dirty.add("load"); dirty.add("guard"); schedule(); });

const stream = new EventSource("/api/stream");
stream.onmessage = e => { const d = JSON.parse(e.data); merge(d.records); schedule(); };
stream.addEventListener("end", () => { ended = true; stream.close(); schedule(); });
stream.onerror = () => {       // the browser retries by itself; say meanwhile that what is shown may be old
  if (ended) return;
  merge({problem: {connection: "the view server is not answering (the run ended, or the view stopped): showing what was received"}});
  schedule();
};
stream.onopen = () => { if (R.problem) delete R.problem.connection; };
