// Leasehold's dashboard: three views over the server's JSON (/_leasehold/api/...), polled
// every POLL_MS; a failed poll says so and keeps trying, so a restarted server is picked up.
"use strict";

const POLL_MS = 2000;
const HISTORY = 300; // points kept per queue for the charts over time
const API = "/_leasehold/api";

const state = {
  queues: [],             // the last /queues answer
  history: new Map(),     // key -> [{t, late_deletes, expired_leases, sent, received, deleted}]
  sort: { column: "name", descending: false },
  bodies: false,
  charts: [],
  timer: null,
  rendering: false,
};

// ---- small DOM helpers -------------------------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const number = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const percent = (part, whole) => (whole > 0 ? `${((100 * part) / whole).toFixed(1)}%` : "–");

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function card(label, value, { bad = false, testid } = {}) {
  return el("div", { class: bad ? "card bad" : "card" },
    el("div", { class: "label", text: label }),
    el("div", { class: "value", "data-testid": testid, text: value }));
}

async function getJson(path, options) {
  const response = await fetch(path, { headers: { accept: "application/json" }, ...options });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.message || `${response.status} ${response.statusText}`);
  return body;
}

function setStatus(ok, text) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = ok ? "" : "down";
}

// ---- history and rates -------------------------------------------------------------------

function remember(queues) {
  const t = Date.now() / 1000;
  for (const q of queues) {
    const points = state.history.get(q.key) || [];
    points.push({ t, late_deletes: q.late_deletes, expired_leases: q.expired_leases,
      sent: q.sent, received: q.received, deleted: q.deleted });
    if (points.length > HISTORY) points.shift();
    state.history.set(q.key, points);
  }
}

// Per second over the last poll interval; null until two polls are in.
function rate(key, field) {
  const points = state.history.get(key) || [];
  if (points.length < 2) return null;
  const [a, b] = points.slice(-2);
  const dt = b.t - a.t;
  return dt > 0 ? Math.max(0, (b[field] - a[field]) / dt) : null;
}

// ---- routing -------------------------------------------------------------------------------

function route() {
  const hash = decodeURIComponent(location.hash.replace(/^#/, "")) || "/";
  const parts = hash.split("/").filter(Boolean);
  if (parts[0] === "queue" && parts.length >= 2) {
    // "#/queue/messages" is the queue named "messages"; its messages are one part further.
    const view = parts.length >= 3 && parts[parts.length - 1] === "messages" ? "messages" : "queue";
    const key = (view === "messages" ? parts.slice(1, -1) : parts.slice(1)).join("/");
    return { view, key };
  }
  return { view: "queues" };
}

const queueHref = (key, suffix = "") => `#/queue/${encodeURIComponent(key)}${suffix}`;

async function refresh() {
  // A refresh asked for while one runs (a click, a new address) runs right after it.
  if (state.rendering) {
    state.again = true;
    return;
  }
  state.rendering = true;
  state.again = false;
  try {
    const { queues } = await getJson(`${API}/queues`);
    state.queues = queues;
    remember(queues);
    const where = route();
    if (where.view === "queues") renderQueues();
    else if (where.view === "queue") await renderQueue(where.key);
    else await renderMessages(where.key);
    setStatus(true, `live · updated ${new Date().toLocaleTimeString()}`);
  } catch (error) {
    setStatus(false, `cannot reach the server (${error.message}); retrying`);
  } finally {
    state.rendering = false;
    if (state.again) refresh();
  }
}

function main() {
  return document.getElementById("main");
}

// What identifies an element across renders: its id, its link, or its column's button.
function identity(node) {
  if (!node || node === document.body || !main().contains(node)) return null;
  if (node.id) return `#${CSS.escape(node.id)}`;
  if (node.getAttribute("href")) return `[href="${CSS.escape(node.getAttribute("href"))}"]`;
  const column = node.closest("th[data-column]");
  if (column) return `th[data-column="${CSS.escape(column.dataset.column)}"] button`;
  return null;
}

// Swaps the view, keeping what the reader had: the focused control, open sections, scroll.
function replaceMain(...children) {
  const focused = identity(document.activeElement);
  const open = [...main().querySelectorAll("details[open]")].map((d) => d.querySelector("summary")?.textContent);
  const scroll = window.scrollY;
  for (const chart of state.charts) chart.destroy();
  state.charts = [];
  main().replaceChildren(...children);
  for (const details of main().querySelectorAll("details")) {
    if (open.includes(details.querySelector("summary")?.textContent)) details.open = true;
  }
  if (focused) main().querySelector(focused)?.focus({ preventScroll: true });
  window.scrollTo(0, scroll);
}

// ---- the queues view -----------------------------------------------------------------------

const COLUMNS = [
  { id: "name", label: "Queue", value: (q) => q.key },
  { id: "visible", label: "Visible", value: (q) => q.messages.visible },
  { id: "in_flight", label: "In flight", value: (q) => q.messages.not_visible },
  { id: "delayed", label: "Delayed", value: (q) => q.messages.delayed, narrow: true },
  { id: "oldest", label: "Oldest", value: (q) => q.oldest_message_age_ms ?? -1, show: (q) => duration(q.oldest_message_age_ms) },
  { id: "send_rate", label: "Sent/s", value: (q) => rate(q.key, "sent") ?? -1, show: (q) => fixed(rate(q.key, "sent")), narrow: true },
  { id: "receive_rate", label: "Received/s", value: (q) => rate(q.key, "received") ?? -1, show: (q) => fixed(rate(q.key, "received")), narrow: true },
  { id: "delete_rate", label: "Deleted/s", value: (q) => rate(q.key, "deleted") ?? -1, show: (q) => fixed(rate(q.key, "deleted")), narrow: true },
  { id: "late", label: "Late deletes", value: (q) => q.late_deletes },
  { id: "dlq", label: "DLQ", value: (q) => q.dead_letter_queue || "", show: (q) => q.dead_letter_queue || "–", narrow: true },
];

const fixed = (n) => (n === null || n === undefined ? "–" : n.toFixed(1));

function sortedQueues() {
  const column = COLUMNS.find((c) => c.id === state.sort.column) || COLUMNS[0];
  const sign = state.sort.descending ? -1 : 1;
  return [...state.queues].sort((a, b) => {
    const x = column.value(a), y = column.value(b);
    return (x < y ? -1 : x > y ? 1 : 0) * sign;
  });
}

function sortBy(id) {
  state.sort = { column: id, descending: state.sort.column === id ? !state.sort.descending : id !== "name" };
  renderQueues();
  const button = document.querySelector(`th[data-column="${id}"] button`);
  if (button) button.focus();
}

function renderQueues() {
  document.title = "Leasehold · queues";
  if (state.queues.length === 0) {
    replaceMain(el("h1", { text: "Queues" }), el("p", { text: "No queues yet. Create one with any SQS client." }));
    return;
  }
  const head = el("tr", {}, COLUMNS.map((c) => el("th", {
    scope: "col", "data-column": c.id, class: c.narrow ? "hide-narrow" : null,
    "aria-sort": state.sort.column === c.id ? (state.sort.descending ? "descending" : "ascending") : "none",
  }, el("button", { type: "button", onclick: () => sortBy(c.id), text: c.label }))));
  const rows = sortedQueues().map((q) => el("tr", {
    class: q.trouble.length ? "trouble" : null, "data-queue": q.key,
  }, COLUMNS.map((c) => {
    if (c.id === "name") {
      return el("td", {},
        el("a", { href: queueHref(q.key), text: q.key }),
        q.fifo ? el("span", { class: "badge", text: "FIFO" }) : null,
        q.sources.length ? el("span", { class: "badge", text: `DLQ of ${q.sources.join(", ")}` }) : null,
        q.trouble.map((t) => el("span", { class: "badge bad", text: t })));
    }
    const text = c.show ? c.show(q) : number(c.value(q));
    return el("td", { class: c.narrow ? "hide-narrow" : null, "data-field": c.id, text });
  })));
  replaceMain(
    el("h1", { text: "Queues" }),
    el("div", { class: "table-wrap" }, el("table", { id: "queues" }, el("thead", {}, head), el("tbody", {}, rows))),
    el("p", { class: "note", text: "Rates are over the last poll. A highlighted queue has late deletes, redeliveries or a DLQ mirage." }));
}

// ---- one queue -----------------------------------------------------------------------------

function bucketLabel(le) {
  return le === null ? "more" : `≤ ${duration(le)}`;
}

// Where a time falls on the bucket axis: inside its bucket, in proportion on a log scale.
function bucketPosition(buckets, ms) {
  let lower = 0;
  for (let i = 0; i < buckets.length; i++) {
    const upper = buckets[i].le_ms;
    if (upper === null || ms <= upper) {
      if (upper === null) return i;
      const span = Math.log(upper) - Math.log(Math.max(lower, 1));
      const into = span > 0 ? (Math.log(Math.max(ms, 1)) - Math.log(Math.max(lower, 1))) / span : 0.5;
      return i - 0.5 + Math.min(Math.max(into, 0), 1);
    }
    lower = upper;
  }
  return buckets.length - 1;
}

// The page's own colours for axes and grid, so charts read in light and dark.
function axisColours() {
  const style = getComputedStyle(document.documentElement);
  return { stroke: style.getPropertyValue("--muted").trim() || "#5b6470",
    grid: { stroke: style.getPropertyValue("--line").trim() || "#d8dde3", width: 1 },
    ticks: { stroke: style.getPropertyValue("--line").trim() || "#d8dde3", width: 1 } };
}

function barChart(target, { labels, values, title, marker, markerLabel, width }) {
  const xs = labels.map((_, i) => i);
  const options = {
    title, width, height: 220,
    scales: { x: { time: false, range: [-0.6, labels.length - 0.4] }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.15)] } },
    axes: [
      { ...axisColours(), values: (u, splits) => splits.map((i) => (Number.isInteger(i) && labels[i] !== undefined ? labels[i] : "")), space: 30, rotate: -30, size: 60 },
      { ...axisColours(), values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? v.toLocaleString("en-US") : "")) },
    ],
    legend: { show: false },
    cursor: { show: false },
    series: [{}, { label: title, fill: "rgba(11, 98, 196, 0.35)", stroke: "#0b62c4", paths: uPlot.paths.bars({ size: [0.8, 60] }), points: { show: false } }],
    hooks: {
      draw: [(u) => {
        if (marker === undefined || marker === null) return;
        const x = u.valToPos(marker, "x", true);
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "#b42318";
        ctx.lineWidth = 2 * devicePixelRatio;
        ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillStyle = "#b42318";
        ctx.font = `${12 * devicePixelRatio}px system-ui`;
        ctx.fillText(markerLabel || "", x + 4 * devicePixelRatio, u.bbox.top + 14 * devicePixelRatio);
        ctx.restore();
      }],
    },
  };
  state.charts.push(new uPlot(options, [xs, values], target));
}

// A poll's instant as the clock on the wall shows it (HH:MM:SS, local time).
function clockTime(seconds) {
  const at = new Date(seconds * 1000);
  return [at.getHours(), at.getMinutes(), at.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

// Whole seconds and up between ticks, to a day (a history kept across a laptop's sleep):
// polls are seconds apart, and uPlot's own time labels for a short span read ":17.000".
const CLOCK_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

function lineChart(target, { title, points, series, width }) {
  const t = points.map((p) => p.t);
  const deltas = series.map((s) => points.map((p, i) => (i === 0 ? 0 : Math.max(0, p[s.field] - points[i - 1][s.field]))));
  const timeAxis = {
    ...axisColours(), incrs: CLOCK_STEPS, space: 80,
    // The labels drawn are also kept on the chart's element: the canvas holds no text.
    values: (u, splits) => {
      const labels = splits.map(clockTime);
      target.dataset.timeLabels = labels.join(" ");
      return labels;
    },
  };
  const options = {
    title, width, height: 200,
    scales: { y: { range: (u, min, max) => [0, Math.max(1, max * 1.2)] } },
    axes: [timeAxis, { ...axisColours(), values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? v : "")) }],
    legend: { show: true, live: false },
    series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2 }))],
  };
  state.charts.push(new uPlot(options, [t, ...deltas], target));
}

function chartWidth() {
  return Math.max(280, Math.min(main().clientWidth - 24, 900));
}

async function renderQueue(key) {
  const detail = await getJson(`${API}/queues/${encodeURIComponent(key)}`);
  const { summary, report, sources, advice } = detail;
  document.title = `Leasehold · ${key}`;
  const holds = report.deleted_within_lease + report.late_deletes;
  const lateShare = percent(report.late_deletes, holds);
  const vtMs = report.settings.visibility_timeout_s * 1000;
  const histogram = el("div", { class: "chart", id: "hold-chart" });
  const overTime = el("div", { class: "chart", id: "late-chart" });
  const receives = el("div", { class: "chart", id: "receive-chart" });
  const bucketRows = report.lease_hold_buckets.map((b) => el("tr", { "data-le": b.le_ms === null ? "inf" : b.le_ms },
    el("td", { text: bucketLabel(b.le_ms) }), el("td", { "data-field": "count", text: number(b.count) })));
  const receiveRows = Object.entries(report.receive_count_histogram).map(([count, messages]) =>
    el("tr", { "data-receives": count }, el("td", { text: `received ${count}×` }), el("td", { "data-field": "count", text: number(messages) })));
  const q = (name, p) => el("tr", {}, el("td", { text: name }), el("td", { text: duration(p.p50) }), el("td", { text: duration(p.p90) }),
    el("td", { text: duration(p.p99) }), el("td", { text: duration(p.max) }), el("td", { text: number(p.count) }));
  replaceMain(
    el("nav", { class: "tabs", "aria-label": "Queue" },
      el("a", { href: "#/", text: "← All queues" }),
      el("a", { href: queueHref(key, "/messages"), text: "Messages" })),
    el("h1", {}, key, summary.fifo ? el("span", { class: "badge", text: "FIFO" }) : null),
    summary.trouble.length ? el("p", { class: "badge bad", role: "note", text: summary.trouble.join(" · ") }) : null,
    el("div", { class: "cards" },
      card("Visible", number(report.messages.visible), { testid: "visible" }),
      card("In flight", number(report.messages.not_visible), { testid: "in-flight" }),
      card("Delayed", number(report.messages.delayed), { testid: "delayed" }),
      card("Visibility timeout", `${report.settings.visibility_timeout_s} s`, { testid: "visibility-timeout" }),
      card("Holds beyond the lease", lateShare, { bad: report.late_deletes > 0, testid: "late-share" }),
      card("Late deletes", number(report.late_deletes), { bad: report.late_deletes > 0, testid: "late-deletes" }),
      card("Expired leases", number(report.expired_leases), { testid: "expired-leases" }),
      card("DLQ moves", number(report.dlq_moves), { testid: "dlq-moves" }),
      card("…whose work had succeeded", number(report.dlq_moves_after_late_delete), { bad: report.dlq_moves_after_late_delete > 0, testid: "dlq-mirage" })),
    tenantsView(report.fairness),
    el("h2", { text: "How long consumers hold messages" }),
    el("p", { class: "note", text: `Receive-to-delete times since start; the dashed line is the visibility timeout (${report.settings.visibility_timeout_s} s). ${lateShare} of holds outlived it.` }),
    histogram,
    el("details", {}, el("summary", { text: "The histogram's buckets" }),
      el("table", { id: "hold-buckets" }, el("thead", {}, el("tr", {}, el("th", { text: "Held" }), el("th", { text: "Deletes" }))), el("tbody", {}, bucketRows))),
    el("h2", { text: "Late deletes and expired leases over time" }),
    el("p", { class: "note", text: "Per poll since this page opened." }),
    overTime,
    el("h2", { text: "Receive counts" }),
    el("p", { class: "note", text: "How many times the messages that left the queue had been received." }),
    receives,
    el("table", { id: "receive-counts", class: "sr-only" }, el("tbody", {}, receiveRows)),
    el("h2", { text: "Waits and holds" }),
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ["", "p50", "p90", "p99", "max", "count"].map((h) => el("th", { text: h })))),
      el("tbody", {}, q("Send to first receive", report.send_to_first_receive_ms), q("Receive to delete", report.lease_hold_ms),
        q("Receive to delete, last 15 min", report.lease_hold_ms_last_15m)))),
    el("h2", { text: "Dead letters" }),
    el("p", {}, summary.dead_letter_queue
      ? el("span", {}, "Dead-letter queue: ", el("a", { href: queueHref(summary.dead_letter_queue), text: summary.dead_letter_queue }), ` after ${summary.max_receive_count} receives.`)
      : "No dead-letter queue.",
    sources.length ? el("span", {}, " It is the dead-letter queue of ", sources.map((s, i) => [i ? ", " : "", el("a", { href: queueHref(s), text: s })]), ".") : null),
    el("h2", { text: "What the advisor recommends" }),
    adviceView(advice));
  const width = chartWidth();
  barChart(histogram, {
    title: "Lease holds", width,
    labels: report.lease_hold_buckets.map((b) => bucketLabel(b.le_ms)),
    values: report.lease_hold_buckets.map((b) => b.count),
    marker: report.lease_hold_buckets.length ? bucketPosition(report.lease_hold_buckets, vtMs) : null,
    markerLabel: `lease ${report.settings.visibility_timeout_s} s`,
  });
  lineChart(overTime, {
    title: "Per poll", width, points: state.history.get(key) || [],
    series: [{ field: "late_deletes", label: "late deletes", color: "#b42318" }, { field: "expired_leases", label: "expired leases", color: "#b7791f" }],
  });
  const counts = Object.entries(report.receive_count_histogram);
  barChart(receives, { title: "Messages by receive count", width, labels: counts.map(([c]) => `${c}×`), values: counts.map(([, n]) => n) });
}

// A standard queue's tenants (fair queues): AWS's figures, and the noisy tenants themselves.
function tenantsView(fairness) {
  if (!fairness) return null;
  const rows = fairness.noisy_tenants.map((t) => el("tr", { "data-group": t.group },
    el("td", { text: t.group }), el("td", { "data-field": "in-flight", text: number(t.messages.not_visible) }),
    el("td", { text: number(t.messages.visible) }), el("td", { text: duration(t.mean_hold_ms) }),
    el("td", { text: `${Math.round(t.processing_share * 100)}%` })));
  return el("section", { "data-testid": "tenants" },
    el("h2", { text: "Tenants" }),
    el("p", { class: "note", text: "A tenant is a message group id. One that holds more than a tenth of the queue's messages in flight (and at least 30), or of its recent processing time, is noisy: quiet tenants' messages go first until its backlog is gone or it sends nothing for five minutes." }),
    el("div", { class: "cards" },
      card("Noisy tenants", number(fairness.noisy_groups), { bad: fairness.noisy_groups > 0, testid: "noisy-groups" }),
      card("Visible, quiet tenants", number(fairness.quiet_messages.visible), { testid: "quiet-visible" }),
      card("Oldest quiet message", duration(fairness.oldest_quiet_message_age_ms), { testid: "quiet-oldest" })),
    rows.length ? el("div", { class: "table-wrap" }, el("table", { id: "noisy-tenants" },
      el("thead", {}, el("tr", {}, ["Noisy tenant", "In flight", "Visible", "Mean hold", "Share of processing"].map((h) => el("th", { text: h })))),
      el("tbody", {}, rows))) : null);
}

function adviceView(advice) {
  if (advice.unavailable) return el("p", { class: "note", "data-testid": "advice", text: advice.unavailable });
  return el("div", { "data-testid": "advice" },
    el("p", {},
      `Visibility timeout ${advice.visibility_timeout_s} s`,
      advice.heartbeat_interval_s ? `, heartbeat every ${advice.heartbeat_interval_s} s` : ", no heartbeat needed",
      `, maxReceiveCount ${advice.max_receive_count}.`),
    el("ul", {}, advice.reasons.map((r) => el("li", { text: r })), advice.warnings.map((w) => el("li", { class: "badge bad", text: w }))),
    el("p", { text: "To apply it:" }),
    el("pre", { text: advice.apply.join("\n") }));
}

// ---- messages ------------------------------------------------------------------------------

async function renderMessages(key) {
  const row = state.queues.find((q) => q.key === key);
  const peek = await getJson(`${API}/queues/${encodeURIComponent(key)}/messages?limit=20&bodies=${state.bodies}`);
  document.title = `Leasehold · ${key} · messages`;
  const stored = row ? row.messages.visible + row.messages.not_visible + row.messages.delayed : 0;
  const isDlq = row && row.sources.length > 0;
  const rows = peek.messages.map((m) => el("tr", { "data-message": m.message_id },
    el("td", { text: m.message_id }),
    el("td", { text: duration(Date.now() - m.sent_ms) }),
    el("td", { "data-field": "receive-count", text: m.receive_count }),
    el("td", { text: m.state }),
    el("td", { class: "hide-narrow", text: m.group_id || "" }),
    state.bodies ? el("td", { class: "body", text: m.body }) : null));
  replaceMain(
    el("nav", { class: "tabs", "aria-label": "Queue" },
      el("a", { href: "#/", text: "← All queues" }),
      el("a", { href: queueHref(key), text: "Leases" })),
    el("h1", {}, `${key}: oldest messages`),
    el("p", { class: "note", text: "Read without receiving them: no receive count changes, no lease starts." }),
    el("p", {},
      el("button", { type: "button", id: "toggle-bodies", "aria-pressed": String(state.bodies),
        onclick: () => { state.bodies = !state.bodies; refresh(); }, text: state.bodies ? "Hide bodies" : "Show bodies" }),
      " ",
      isDlq ? el("button", { type: "button", id: "redrive", class: "primary", onclick: () => confirmRedrive(key, stored, row.sources),
        text: `Move ${number(stored)} messages back to ${row.sources.join(", ")}` }) : null),
    el("div", { class: "table-wrap" }, el("table", { id: "messages" },
      el("thead", {}, el("tr", {}, ["Message id", "Age", "Receives", "State", "Group", state.bodies ? "Body" : null]
        .filter(Boolean).map((h) => el("th", { scope: "col", class: h === "Group" ? "hide-narrow" : null, text: h })))),
      el("tbody", {}, rows))),
    peek.messages.length === 0 ? el("p", { text: "The queue is empty." }) : null,
    el("p", { id: "redrive-result", role: "status" }));
}

function confirmRedrive(key, count, sources) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent =
    `${number(count)} messages will move from ${key} back to ${sources.join(", ")}, each to the queue it came from.`;
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (dialog.returnValue !== "move") return;
    try {
      const result = await getJson(`${API}/queues/${encodeURIComponent(key)}/redrive`, {
        method: "POST", headers: { "content-type": "application/json", accept: "application/json" },
        body: JSON.stringify({ expected: count }),
      });
      state.lastRedrive = result;
      await refresh();
      document.getElementById("redrive-result").textContent = `Moving ${number(result.messages)} messages (task ${result.task_handle.slice(0, 12)}…).`;
    } catch (error) {
      document.getElementById("redrive-result").textContent = `Not moved: ${error.message}`;
    }
  };
  dialog.showModal();
  document.getElementById("confirm-move").focus();
}

// ---- start ---------------------------------------------------------------------------------

window.addEventListener("hashchange", () => {
  window.scrollTo(0, 0);
  refresh().then(() => main().focus({ preventScroll: true }));
});
window.addEventListener("resize", () => {
  const where = route();
  if (where.view === "queue") refresh();
});
refresh();
// A tab nobody looks at costs the server nothing; it catches up when shown again.
state.timer = setInterval(() => {
  if (!document.hidden) refresh();
}, POLL_MS);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh();
});
