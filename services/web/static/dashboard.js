// The dashboard: reads the JSON API, draws SVG charts, and reloads its
// numbers on each `update` of /api/events (a batch stored), never the page.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const HEALTH_EVERY_MS = 5000; // the text processor stores nothing in Postgres: its lag is polled

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

function time(iso) {
  return iso ? new Date(iso).toISOString().slice(11, 19) : "";
}

// Horizontal bars, one per word: label, bar, count.
function barChart(svg, rows) {
  const width = 400, rowHeight = 22, labelWidth = 110, countWidth = 60;
  const most = Math.max(1, ...rows.map((row) => row.count));
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${Math.max(1, rows.length) * rowHeight}`);
  if (rows.length === 0) svg.append(element("text", { x: 0, y: 15 }, "no complete window yet"));
  rows.forEach((row, i) => {
    const y = i * rowHeight;
    const barWidth = ((width - labelWidth - countWidth) * row.count) / most;
    const group = element("g", { "data-word": row.word, "data-count": row.count });
    group.append(
      element("text", { x: 0, y: y + 15 }, row.word.length > 16 ? row.word.slice(0, 15) + "…" : row.word),
      element("rect", { class: "bar", x: labelWidth, y: y + 3, width: Math.max(1, barWidth), height: rowHeight - 6 }),
      element("text", { x: labelWidth + barWidth + 4, y: y + 15 }, row.count.toLocaleString("en")),
    );
    svg.append(group);
  });
}

// A line over time, with the first and last times and the highest value.
function lineChart(svg, points, valueOf, emptyText) {
  const width = 400, height = 150, top = 15, bottom = 20;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  if (points.length === 0) {
    svg.append(element("text", { x: 0, y: 15 }, emptyText));
    return;
  }
  const times = points.map((point) => Date.parse(point.window_start));
  const first = Math.min(...times), span = Math.max(1, Math.max(...times) - first);
  const most = Math.max(1, ...points.map(valueOf));
  const x = (t) => ((t - first) / span) * (width - 10) + 5;
  const y = (value) => height - bottom - (value / most) * (height - top - bottom);
  svg.append(
    element("line", { class: "axis", x1: 0, x2: width, y1: height - bottom, y2: height - bottom }),
    element("polyline", { class: "line", points: points.map((p, i) => `${x(times[i])},${y(valueOf(p))}`).join(" ") }),
    element("text", { x: 0, y: 12 }, `max ${most.toLocaleString("en")}`),
    element("text", { x: 0, y: height - 4 }, time(points[0].window_start)),
    element("text", { x: width, y: height - 4, "text-anchor": "end" }, time(points[points.length - 1].window_start)),
  );
  points.forEach((point, i) => {
    const dot = element("circle", { class: "dot", cx: x(times[i]), cy: y(valueOf(point)), r: 2,
                                    "data-window": point.window_start, "data-value": valueOf(point) });
    dot.append(element("title", {}, `${point.window_start}: ${valueOf(point)}`));
    svg.append(dot);
  });
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
  const top = await api("/api/top-words?limit=10");
  document.getElementById("top-window").textContent = top.from ? `${time(top.from)}–${time(top.to)} UTC` : "";
  barChart(document.getElementById("top-chart"), top.words);
}

async function showVolume() {
  const volume = await api("/api/words-per-window");
  document.getElementById("volume-range").textContent = volume.from ? `${time(volume.from)}–${time(volume.to)} UTC` : "";
  lineChart(document.getElementById("volume-chart"), volume.points, (p) => p.words, "no windows yet");
}

async function showSeries() {
  const word = document.getElementById("word").value.trim();
  if (!word) return;
  const series = await api(`/api/words/${encodeURIComponent(word)}/series`);
  lineChart(document.getElementById("series-chart"), series.points, (p) => p.count, `no “${word}” in the last hour`);
}

async function showAlerts() {
  const { alerts } = await api("/api/alerts?limit=20");
  tableRows(document.getElementById("alerts"), alerts, (alert) => [
    [alert.user],
    [`${time(alert.window_start)}–${time(alert.window_end)}`],
    [alert.count.toLocaleString("en")],
    [alert.severity, alert.severity === "urgent" ? "urgent" : ""],
    [alert.delivery === "delivered" ? `${alert.channel}` : `${alert.delivery} (${alert.channel})`],
  ]);
}

async function showHealth() {
  const { workers } = await api("/api/health");
  tableRows(document.getElementById("health"), workers, (worker) => [
    [worker.worker],
    [String(worker.copies)],
    [worker.lag.toLocaleString("en")],
    [worker.last_commit_age_s === null ? "never" : `${Math.round(worker.last_commit_age_s)} s ago`],
    [worker.partitions.map((p) => `${p.partition}: ${p.lag}`).join(", ")],
  ]);
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
new EventSource("/api/events").addEventListener("update", () =>
  refresh([showTopWords, showVolume, showSeries, showAlerts, showHealth]));
setInterval(() => refresh([showHealth]), HEALTH_EVERY_MS);
