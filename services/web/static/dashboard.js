// The dashboard: reads the JSON API, draws SVG charts, and reloads its
// numbers on each `update` of /api/events (a batch stored), never the page.
// Charts are drawn at the width they are shown at, so their text stays
// readable on a phone; a pointer over a line chart (or a tap) shows the
// nearest point's time and value.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const HEALTH_EVERY_MS = 5000; // the text processor stores nothing in Postgres: its lag is polled
const TIME_STEPS_S = [10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];

async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function element(tag, attributes = {}, text = "") {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== "") node.textContent = text;
  return node;
}

// UTC, as every time on the page.
function clock(ms, withSeconds = true) {
  return new Date(ms).toISOString().slice(11, withSeconds ? 19 : 16);
}

function time(iso) {
  return iso ? clock(Date.parse(iso)) : "";
}

function compact(value) {
  if (value >= 1e6) return `${+(value / 1e6).toFixed(value >= 1e7 ? 0 : 1)}M`;
  if (value >= 1e4) return `${Math.round(value / 1e3)}k`;
  return value.toLocaleString("en");
}

function duration(ms) {
  return ms >= 1000 ? `${+(ms / 1000).toFixed(1)} s` : `${ms} ms`;
}

// 0 and whole steps of 1, 2 or 5 × 10^k, up to at least `most`.
function valueTicks(most) {
  const rough = most / 4;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = Math.max(1, [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough));
  const ticks = [0];
  while (ticks[ticks.length - 1] < most) ticks.push(ticks[ticks.length - 1] + step);
  return ticks;
}

// Round times between first and last, at most one per 70 px.
function timeTicks(first, last, pixels) {
  const most = Math.max(1, Math.floor(pixels / 70));
  const step = 1000 * (TIME_STEPS_S.find((s) => (last - first) / (s * 1000) <= most) ?? 86400);
  const ticks = [];
  for (let t = Math.ceil(first / step) * step; t <= last; t += step) ticks.push(t);
  return { ticks, withSeconds: step < 60000 };
}

function widthOf(svg) {
  return Math.max(200, Math.round(svg.getBoundingClientRect().width)) || 400;
}

// What each chart was last drawn from, to draw it again at a new width.
const drawn = new Map();

function draw(svg, how) {
  drawn.set(svg, how);
  how();
}

// Horizontal bars, one per word: label, bar, count.
function barChart(svg, rows, emptyText) {
  const width = widthOf(svg), rowHeight = 22, countWidth = 60;
  const labelWidth = Math.min(140, Math.round(width * 0.3));
  const most = Math.max(1, ...rows.map((row) => row.count));
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${Math.max(1, rows.length) * rowHeight}`);
  if (rows.length === 0) svg.append(element("text", { x: 0, y: 15 }, emptyText));
  const fits = Math.max(4, Math.floor(labelWidth / 8));
  rows.forEach((row, i) => {
    const y = i * rowHeight;
    const barWidth = ((width - labelWidth - countWidth) * row.count) / most;
    const group = element("g", { "data-word": row.word, "data-count": row.count });
    group.append(
      element("title", {}, `${row.word}: ${row.count.toLocaleString("en")}`),
      element("text", { x: 0, y: y + 15 }, row.word.length > fits ? row.word.slice(0, fits - 1) + "…" : row.word),
      element("rect", { class: "bar", x: labelWidth, y: y + 3, width: Math.max(1, barWidth), height: rowHeight - 6 }),
      element("text", { x: labelWidth + barWidth + 4, y: y + 15 }, row.count.toLocaleString("en")),
    );
    svg.append(group);
  });
}

// A line over time with both axes. points: [{t: epoch ms, v: number or
// null (a gap)}]. With `dots`, each point is a circle carrying its value.
// `span`: the time the x axis covers, up to the last point (by default, the points' own).
function lineChart(svg, points, { empty, dots = true, height = 170, span = 0, format = (v) => v.toLocaleString("en"),
                                  tick = compact }) {
  const width = widthOf(svg);
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const known = points.filter((p) => p.v !== null);
  if (known.length === 0) {
    svg.setAttribute("viewBox", `0 0 ${width} 24`);
    svg.append(element("text", { x: 0, y: 15 }, empty));
    return;
  }
  const yTicks = valueTicks(Math.max(1, ...known.map((p) => p.v)));
  const top = 8, bottom = 20, right = 12;
  const left = 10 + 7 * Math.max(...yTicks.map((v) => tick(v).length));
  const last = Math.max(...points.map((p) => p.t));
  const first = span ? last - span : Math.min(...points.map((p) => p.t));
  const plotWidth = width - left - right, plotHeight = height - top - bottom;
  const x = (t) => left + (last === first ? plotWidth / 2 : ((t - first) / (last - first)) * plotWidth);
  const y = (v) => top + plotHeight - (v / yTicks[yTicks.length - 1]) * plotHeight;

  for (const v of yTicks) {
    svg.append(element("line", { class: v === 0 ? "axis" : "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }),
               element("text", { class: "tick", x: left - 4, y: y(v) + 4, "text-anchor": "end" }, tick(v)));
  }
  const { ticks, withSeconds } = timeTicks(first, last, plotWidth);
  const half = withSeconds ? 28 : 18; // half a label's width: the ones at the edges stay inside
  for (const t of ticks) {
    const at = Math.min(Math.max(x(t), half), width - half);
    svg.append(element("line", { class: "axis", x1: x(t), x2: x(t), y1: top + plotHeight, y2: top + plotHeight + 4 }),
               element("text", { class: "tick", x: at, y: height - 4, "text-anchor": "middle" }, clock(t, withSeconds)));
  }
  let run = [];
  const endRun = () => {
    if (run.length) svg.append(element("polyline", { class: "line", points: run.join(" ") }));
    run = [];
  };
  for (const p of points) {
    if (p.v === null) endRun();
    else run.push(`${x(p.t)},${y(p.v)}`);
  }
  endRun();
  if (dots) {
    for (const p of known) {
      svg.append(element("circle", { class: "dot", cx: x(p.t), cy: y(p.v), r: 2.5, "data-value": p.v }));
    }
  }
  const hit = element("rect", { class: "hit", x: left, y: 0, width: plotWidth, height: top + plotHeight });
  const tip = element("g", { class: "tip", visibility: "hidden" });
  svg.append(hit, tip);
  const show = (event) => {
    const box = svg.getBoundingClientRect();
    const at = ((event.clientX - box.left) * width) / box.width;
    const near = known.reduce((best, p) => (Math.abs(x(p.t) - at) < Math.abs(x(best.t) - at) ? p : best));
    showTip(tip, x(near.t), y(near.v), `${clock(near.t)}  ${format(near.v)}`, width, top, top + plotHeight);
  };
  hit.addEventListener("pointermove", show);
  hit.addEventListener("pointerdown", show); // a tap
  svg.addEventListener("pointerleave", () => tip.setAttribute("visibility", "hidden"));
}

function showTip(tip, px, py, text, width, top, bottom) {
  const label = element("text", { y: top + 12 }, text);
  const background = element("rect", { y: top - 2, height: 18, rx: 3 });
  tip.replaceChildren(element("line", { x1: px, x2: px, y1: top, y2: bottom }),
                      element("circle", { cx: px, cy: py, r: 4 }), background, label);
  tip.setAttribute("visibility", "visible");
  const labelWidth = label.getComputedTextLength() + 10;
  const left = Math.min(Math.max(0, px - labelWidth / 2), width - labelWidth);
  background.setAttribute("x", left);
  background.setAttribute("width", labelWidth);
  label.setAttribute("x", left + 5);
}

function windows(points, valueOf) {
  return points.map((p) => ({ t: Date.parse(p.window_start), v: valueOf(p) }));
}

function tableRows(tbody, rows, cellsOf) {
  tbody.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    for (const [text, className] of cellsOf(row)) {
      const td = document.createElement("td");
      td.textContent = text;
      if (className) td.className = className;
      tr.append(td);
    }
    return tr;
  }));
}

async function showTopWords() {
  const minutes = document.getElementById("top-range").value;
  const top = await api(`/api/top-words?limit=10${minutes ? `&minutes=${minutes}` : ""}`);
  document.getElementById("top-window").textContent = top.from ? `${time(top.from)}–${time(top.to)} UTC` : "";
  const svg = document.getElementById("top-chart");
  draw(svg, () => barChart(svg, top.words, "no complete window yet"));
}

async function showVolume() {
  const volume = await api("/api/words-per-window");
  document.getElementById("volume-range").textContent = volume.from ? `${time(volume.from)}–${time(volume.to)} UTC` : "";
  const svg = document.getElementById("volume-chart");
  draw(svg, () => lineChart(svg, windows(volume.points, (p) => p.words), { empty: "no windows yet" }));
}

async function showSeries() {
  const word = document.getElementById("word").value.trim();
  if (!word) return;
  const series = await api(`/api/words/${encodeURIComponent(word)}/series`);
  const svg = document.getElementById("series-chart");
  draw(svg, () => lineChart(svg, windows(series.points, (p) => p.count), { empty: `no “${word}” in the last hour` }));
}

async function showAlerts() {
  const { alerts } = await api("/api/alerts?limit=20");
  tableRows(document.getElementById("alerts"), alerts, (alert) => [
    [alert.user, "id"],
    [`${time(alert.window_start)}–${time(alert.window_end)}`],
    [alert.count.toLocaleString("en")],
    [alert.severity, alert.severity === "urgent" ? "urgent" : ""],
    [alert.delivery === "delivered" ? `${alert.channel}` : `${alert.delivery} (${alert.channel})`],
  ]);
}

async function showDeadLetters() {
  const hours = document.getElementById("dead-range").value;
  const { counts, latest } = await api(`/api/dead-letters?hours=${hours}&limit=20`);
  tableRows(document.getElementById("dead-counts"), counts, (row) => [
    [row.worker], [row.reason], [row.letters.toLocaleString("en")],
  ]);
  tableRows(document.getElementById("dead-letters"), latest, (letter) => [
    [time(letter.skipped_at)],
    [letter.worker],
    [letter.replayed_at ? `${letter.reason} (replayed)` : letter.reason],
    [`${letter.topic} ${letter.partition}:${letter.offset}`, "id"],
    [letter.value_start === null ? "(no value)"
      : `${letter.value_start}${letter.value_bytes > 120 ? ` … (${letter.value_bytes.toLocaleString("en")} bytes)` : ""}`, "id"],
  ]);
}

async function showHealth() {
  const { workers } = await api("/api/health");
  tableRows(document.getElementById("health"), workers, (worker) => [
    [worker.worker],
    [String(worker.copies)],
    [worker.lag.toLocaleString("en")],
    [worker.last_commit_age_s === null ? "never"
      : `${Math.round(worker.last_commit_age_s)} s ago${worker.last_batch_ms === null ? "" : `, took ${duration(worker.last_batch_ms)}`}`],
    [worker.partitions.map((p) => `${p.partition}: ${p.lag}`).join(", "), "id"],
  ]);
}

// Two small charts a worker: its lag and its batches' durations.
async function showHistory() {
  const { every_s: every, span_s: span, workers } = await api("/api/history");
  document.getElementById("history-every").textContent = every;
  const box = document.getElementById("history");
  box.replaceChildren(...workers.flatMap((worker) => [
    figure(`lag-${worker.worker}`, `${worker.worker}: lag (records)`,
           worker.lag.map((s) => ({ t: Date.parse(s.at), v: s.lag })),
           { dots: false, span: span * 1000, empty: "no samples yet" }),
    figure(`batch-${worker.worker}`, `${worker.worker}: batch duration`,
           worker.batches.map((b) => ({ t: Date.parse(b.at), v: b.batch_ms })),
           { span: span * 1000, format: duration, tick: duration, empty: "no batch in the last hour" }),
  ]));
}

function figure(id, caption, points, options) {
  const node = document.createElement("figure");
  const title = document.createElement("figcaption");
  title.textContent = caption;
  const svg = element("svg", { id, class: "chart", role: "img", "aria-label": caption });
  node.append(title, svg);
  // Drawn once it is in the page, at its width.
  requestAnimationFrame(() => draw(svg, () => lineChart(svg, points, { height: 120, ...options })));
  return node;
}

function status(text, className) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = className;
}

async function refresh(parts) {
  try {
    await Promise.all(parts.map((show) => show()));
    status(`updated ${new Date().toLocaleTimeString()}`, "live");
  } catch (error) {
    status(`cannot load: ${error.message}`, "error");
  }
}

document.getElementById("word-form").addEventListener("submit", (event) => {
  event.preventDefault();
  refresh([showSeries]);
});
document.getElementById("top-range").addEventListener("change", () => refresh([showTopWords]));
document.getElementById("dead-range").addEventListener("change", () => refresh([showDeadLetters]));
let resizing = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => {
    for (const [svg, how] of drawn) if (svg.isConnected) how(); else drawn.delete(svg);
  }, 100);
});
new EventSource("/api/events").addEventListener("update", () =>
  refresh([showTopWords, showVolume, showSeries, showAlerts, showDeadLetters, showHealth, showHistory]));
setInterval(() => refresh([showHealth, showHistory, showDeadLetters]), HEALTH_EVERY_MS);
