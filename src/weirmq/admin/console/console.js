// The WeirMQ console: one ES module, no dependencies, nothing loaded from elsewhere.
//
// Theory of operation. The page routes by the URL's fragment (#/topics/orders), so every
// page is a link. A page is built once when it is shown (its skeleton: headings, forms,
// empty tables) and then refreshed in place every POLL_MS while the tab is visible: a
// refresh replaces only table rows whose data changed and the text of a few cells, so
// whatever the user typed into a form, the focus and the scroll position survive. Every
// answer of the admin API that is not a success is shown in the alert region under the
// header, never dropped; a 401 opens the token dialog and the request is retried with the
// token. Data from the broker (names, keys, values) only ever enters the page as text
// nodes: nothing here assigns innerHTML.

const POLL_MS = 2000;
const TOKEN_KEY = "weirmq.admin-token";
const SVG_NS = "http://www.w3.org/2000/svg";
const GO_KEYS = { o: "#/overview", t: "#/topics", g: "#/groups", e: "#/exchanges", q: "#/queues", c: "#/connections" };
const CHORD_MS = 1500;

// --- DOM helpers ----------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name === "value" || name === "checked") el[name] = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

function setText(el, text) {
  const value = String(text);
  if (el.textContent !== value) el.textContent = value;
}

let uniqueId = 0;
function uid(prefix) {
  uniqueId += 1;
  return `${prefix}-${uniqueId}`;
}

// A labelled control: label and input bound by id.
function field(labelText, control, hint) {
  control.id ||= uid("f");
  return h("div", { class: "field" }, h("label", { for: control.id }, labelText), control, hint ? h("span", { class: "note" }, hint) : null);
}

function table(columns, caption) {
  const tbody = h("tbody");
  const el = h(
    "table",
    {},
    caption ? h("caption", { class: "visually-hidden" }, caption) : null,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.label)))),
    tbody,
  );
  return { el: h("div", { class: "table-wrap" }, el), tbody, columns };
}

// Replace the rows of `tbody` by `items`, keeping the row elements whose data did not
// change (so a focused link or button in them keeps its focus). `cells(item)` returns the
// row's cells, each a string, a node or {num: value}.
function renderRows(tbl, items, key, cells, emptyText) {
  const { tbody, columns } = tbl;
  const old = new Map();
  for (const row of tbody.rows) old.set(row.dataset.key, row);
  const wanted = [];
  for (const item of items) {
    const k = String(key(item));
    const sig = JSON.stringify(item);
    let row = old.get(k);
    if (!row || row.dataset.sig !== sig) row = buildRow(cells(item), columns, k, sig);
    wanted.push(row);
  }
  if (!items.length) {
    const text = emptyText || "None.";
    const kept = old.get("\u0000empty");
    wanted.push(kept && kept.dataset.sig === text ? kept : h("tr", { dataset: { key: "\u0000empty", sig: text } }, h("td", { class: "empty", colspan: columns.length }, text)));
  }
  const keep = new Set(wanted);
  for (const row of [...tbody.rows]) if (!keep.has(row)) row.remove();
  wanted.forEach((row, index) => {
    if (tbody.rows[index] !== row) tbody.insertBefore(row, tbody.rows[index] || null);
  });
}

function buildRow(cells, columns, key, sig) {
  const row = h("tr", { dataset: { key, sig } });
  cells.forEach((cell, i) => {
    const header = i === 0 && columns[0].rowHeader;
    const tag = header ? "th" : "td";
    const attrs = { class: [columns[i]?.num ? "num" : "", columns[i]?.mono ? "mono" : ""].join(" ").trim() || null };
    if (header) attrs.scope = "row";
    row.append(h(tag, attrs, cell === null || cell === undefined ? "–" : cell));
  });
  return row;
}

function filterBox(onChange, what) {
  const input = h("input", { type: "search", class: "page-filter", placeholder: `Filter ${what}…`, "aria-keyshortcuts": "/", oninput: onChange });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      input.value = "";
      onChange();
      input.blur();
    }
  });
  return { input, el: field(`Filter ${what} (press /)`, input) };
}

function matches(filter, ...texts) {
  const wanted = filter.value.trim().toLowerCase();
  return !wanted || texts.some((t) => String(t ?? "").toLowerCase().includes(wanted));
}

function link(href, text) {
  return h("a", { href }, text);
}

// --- formatting -----------------------------------------------------------------------------

const NUMBER = new Intl.NumberFormat("en");

function num(value) {
  return value === null || value === undefined ? "–" : NUMBER.format(value);
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value;
  let unit = 0;
  while (Math.abs(v) >= 1024 && unit < units.length - 1) {
    v /= 1024;
    unit += 1;
  }
  return `${unit ? v.toFixed(v < 10 ? 2 : 1) : v} ${units[unit]}`;
}

function rate(value, unit) {
  if (value === null || value === undefined) return "–";
  return unit === "B" ? `${bytes(Math.round(value))}/s` : `${NUMBER.format(Math.round(value * 10) / 10)}/s`;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  let rest = Math.floor(ms / 1000);
  if (rest < 60) return `${rest} s`;
  const parts = [];
  for (const [size, name] of [[86400, "d"], [3600, "h"], [60, "min"]]) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)} ${name}`);
      rest %= size;
    }
  }
  if (parts.length < 2 && rest) parts.push(`${rest} s`);
  return parts.slice(0, 2).join(" ");
}

function timestamp(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? String(ms) : date.toISOString().replace("T", " ").replace("Z", " UTC");
}

function retention(configs) {
  const ms = configs["retention.ms"];
  const size = configs["retention.bytes"];
  const parts = [];
  if (ms !== undefined) parts.push(Number(ms) < 0 ? "forever" : duration(Number(ms)));
  if (size !== undefined && Number(size) >= 0) parts.push(bytes(Number(size)));
  return parts.length ? parts.join(", ") : "broker default";
}

// --- the API --------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message, path) {
    super(message);
    this.status = status;
    this.code = code;
    this.path = path;
  }
}

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function storeToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // storage refused (a private window's quota): the token then lasts for this page only
  }
  memoryToken = token || null;
}

let memoryToken = null;
let tokenDeclined = false;

async function api(method, path, body) {
  for (let attempt = 0; ; attempt += 1) {
    const headers = { Accept: "application/json" };
    const token = storedToken() || memoryToken;
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = { method, headers, credentials: "same-origin", cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (exc) {
      throw new ApiError(0, "NETWORK_ERROR", `the broker did not answer (${exc.message}); is it running?`, path);
    }
    if (response.status === 401 && method === "GET" && tokenDeclined) {
      // Polls would otherwise ask again every two seconds after the user said no.
      throw new ApiError(401, "TOKEN_REQUIRED", "the admin API asks for a token for every request here; press Token in the header to enter it", path);
    }
    if (response.status === 401 && attempt < 3) {
      const reason = token ? "The token was refused; enter the current one." : "This request needs the admin token.";
      const given = await askToken(reason);
      if (given) continue;
      tokenDeclined = true;
      throw new ApiError(401, "TOKEN_REQUIRED", "the admin API asked for a token and none was given", path);
    }
    if (response.status === 204) return null;
    const text = await response.text();
    let document = null;
    try {
      document = text ? JSON.parse(text) : null;
    } catch {
      document = null;
    }
    if (!response.ok) {
      const error = document && document.error;
      if (error) throw new ApiError(response.status, error.code, error.message, path);
      throw new ApiError(response.status, `HTTP_${response.status}`, text.slice(0, 300) || response.statusText, path);
    }
    return document;
  }
}

// --- the token dialog -----------------------------------------------------------------------

let tokenWaiting = null;

function askToken(reason) {
  if (tokenWaiting) return tokenWaiting;
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  setText(document.getElementById("token-reason"), reason);
  const where = document.getElementById("token-where");
  setText(where, knownDataDir ? ` (here: ${knownDataDir})` : "");
  if (!knownDataDir) learnDataDir(where);
  input.value = "";
  tokenWaiting = new Promise((resolve) => {
    const finish = (token) => {
      dialog.removeEventListener("close", onClose);
      tokenWaiting = null;
      if (dialog.open) dialog.close();
      if (token) {
        storeToken(token);
        tokenDeclined = false;
      }
      resolve(token);
    };
    const onClose = () => finish(null);
    dialog.addEventListener("close", onClose);
    dialog.onsubmit = (e) => {
      e.preventDefault();
      finish(input.value.trim() || null);
    };
    document.getElementById("token-cancel").onclick = () => finish(null);
  });
  dialog.showModal();
  input.focus();
  return tokenWaiting;
}

let knownDataDir = null;

// Where the token file is, for the dialog: the broker document names the data directory.
// Only a hint, so a failure (off loopback, reading needs the token too) just leaves it out.
async function learnDataDir(where) {
  try {
    const response = await fetch("/api/v1/broker", { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!response.ok) return;
    knownDataDir = (await response.json()).data_dir || null;
    if (knownDataDir) setText(where, ` (here: ${knownDataDir})`);
  } catch {
    // the hint is optional; the dialog says what the file is called either way
  }
}

// --- alerts ---------------------------------------------------------------------------------

const alerts = new Map();

// Show `error` in the alert region; `key` names the source, so a poll failing every two
// seconds updates one alert instead of adding one each time.
function showError(error, key) {
  const code = error instanceof ApiError ? error.code : error.name || "ERROR";
  const status = error instanceof ApiError && error.status ? ` (HTTP ${error.status})` : "";
  const where = error instanceof ApiError && error.path ? ` — ${error.path}` : "";
  showAlert(key || uid("alert"), [h("code", {}, code), status, ": ", error.message, h("span", { class: "muted" }, where)], "error");
}

function showInfo(text, key) {
  showAlert(key || uid("info"), [text], "info");
}

function showAlert(key, content, kind) {
  const region = document.getElementById("alerts");
  let item = alerts.get(key);
  const text = h("div", { class: "text" }, content);
  if (item) {
    if (item.querySelector(".text").textContent !== text.textContent) item.querySelector(".text").replaceWith(text);
    return;
  }
  item = h("div", { class: `alert ${kind}`, dataset: { key } }, text, h("button", { type: "button", class: "quiet", onclick: () => clearAlert(key), "aria-label": "Dismiss" }, "Dismiss"));
  alerts.set(key, item);
  region.append(item);
}

function clearAlert(key) {
  const item = alerts.get(key);
  if (item) item.remove();
  alerts.delete(key);
}

// Run an action (a form's submit) and show its failure; returns its result or undefined.
async function act(button, action) {
  if (button) button.disabled = true;
  try {
    return await action();
  } catch (error) {
    showError(error);
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

// --- charts ---------------------------------------------------------------------------------

const CHART_W = 600;
const CHART_PAD = { left: 84, right: 10, top: 10, bottom: 22 };

// A line chart of `series` ([{label, key, cls, format}]); returns {el, update(samples, spanMs)}.
function lineChart(title, series, height = 170) {
  const paths = series.map((_, i) => s("path", { class: `series s${i}`, d: "" }));
  const grid = s("g");
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${CHART_W} ${height}`, height, role: "img", "aria-label": title, dataset: { samples: "0" } }, grid, ...paths);
  const legendValues = series.map(() => h("strong"));
  const legend = h("div", { class: "legend" }, series.map((line, i) => h("span", {}, h("span", { class: `swatch s${i}` }), `${line.label}: `, legendValues[i])));
  const count = h("span", { class: "note sample-count" }, "no samples yet");
  const el = h("figure", { class: "chart-figure" }, svg, legend, h("figcaption", { class: "note" }, count));

  function update(samples, intervalMs) {
    // Drawn at the size it is shown (one SVG unit a CSS pixel), so its text stays legible.
    const W = chartWidth(svg);
    svg.setAttribute("viewBox", `0 0 ${W} ${height}`);
    svg.setAttribute("height", String(height));
    const points = samples.filter((p) => typeof p.at_ms === "number");
    svg.dataset.samples = String(points.length);
    setText(count, points.length ? `${points.length} samples, one every ${Math.round((intervalMs || 0) / 100) / 10} s` : "no samples yet");
    const innerW = W - CHART_PAD.left - CHART_PAD.right;
    const innerH = height - CHART_PAD.top - CHART_PAD.bottom;
    let max = 0;
    for (const p of points) for (const line of series) max = Math.max(max, Number(p[line.key]) || 0);
    max = niceMax(max);
    const first = points.length ? points[0].at_ms : 0;
    const last = points.length ? points[points.length - 1].at_ms : 1;
    const span = Math.max(last - first, 1);
    const x = (at) => CHART_PAD.left + ((at - first) / span) * innerW;
    const y = (v) => CHART_PAD.top + innerH - (v / max) * innerH;
    series.forEach((line, i) => {
      let d = "";
      let pen = "M";
      for (const p of points) {
        const v = p[line.key];
        if (v === null || v === undefined) {
          pen = "M";
          continue;
        }
        d += `${pen}${x(p.at_ms).toFixed(1)},${y(Number(v)).toFixed(1)}`;
        pen = "L";
      }
      if (paths[i].getAttribute("d") !== d) paths[i].setAttribute("d", d);
      const latest = [...points].reverse().find((p) => p[line.key] !== null && p[line.key] !== undefined);
      setText(legendValues[i], latest ? line.format(latest[line.key]) : "–");
    });
    const fmt = series[0].format;
    const ticks = [0, max / 2, max].map((v) =>
      s("g", {}, s("line", { class: "grid-line", x1: CHART_PAD.left, x2: W - CHART_PAD.right, y1: y(v), y2: y(v) }), s("text", { x: CHART_PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(v))),
    );
    const ago = points.length ? `−${duration(span)}` : "";
    ticks.push(s("text", { x: CHART_PAD.left, y: height - 6 }, ago), s("text", { x: W - CHART_PAD.right, y: height - 6, "text-anchor": "end" }, "now"));
    grid.replaceChildren(...ticks);
  }
  return { el, update };
}

function chartWidth(svg) {
  const width = Math.round(svg.getBoundingClientRect().width);
  return width > 100 ? width : CHART_W;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

// A horizontal bar per item ([{label, value}]); returns {el, update(items)}.
function barChart(title) {
  const svg = s("svg", { class: "chart bars", role: "img", "aria-label": title, viewBox: `0 0 ${CHART_W} 40`, height: "40" });
  function update(items) {
    const rowH = 22;
    const height = Math.max(items.length, 1) * rowH + 10;
    const W = chartWidth(svg);
    svg.setAttribute("viewBox", `0 0 ${W} ${height}`);
    svg.setAttribute("height", String(height));
    const labelW = Math.min(220, Math.round(W * 0.35));
    const valueW = 80;
    const max = Math.max(1, ...items.map((i) => i.value || 0));
    const children = items.map((item, index) => {
      const y = 5 + index * rowH;
      const w = ((item.value || 0) / max) * (W - labelW - valueW);
      return s(
        "g",
        {},
        s("text", { x: labelW - 8, y: y + 15, "text-anchor": "end" }, item.label),
        s("rect", { class: item.value ? "bar" : "bar zero", x: labelW, y: y + 3, width: Math.max(w, 1.5).toFixed(1), height: rowH - 8, rx: 2 }),
        s("text", { x: labelW + w + 6, y: y + 15 }, item.value === null ? "unknown" : num(item.value)),
      );
    });
    if (!items.length) children.push(s("text", { x: 10, y: 20 }, "No partitions."));
    svg.replaceChildren(...children);
  }
  return { el: svg, update };
}

// --- pages ----------------------------------------------------------------------------------
//
// A page is {title, node, refresh()}: `node` is built once, `refresh` fetches and updates it
// in place. `refresh` throws on failure; the poller shows the error.

function pageHeader(title, ...extra) {
  return [h("h1", { tabindex: "-1" }, title), ...extra];
}

function panel(title, ...children) {
  return h("section", { class: "panel", "aria-label": title }, h("h2", {}, title), ...children);
}

function card(label, kind) {
  const value = h("div", { class: kind ? `value ${kind}` : "value" }, "–");
  return { el: h("div", { class: "card" }, h("div", { class: "label" }, label), value), value };
}

function overviewPage() {
  const cards = Object.fromEntries(
    [["status", "Health"], ["version", "Version"], ["uptime", "Uptime"], ["node", "Node id"], ["cluster", "Cluster id", "long"], ["topics", "Topics"], ["partitions", "Partitions"], ["groups", "Groups"]].map(([k, label, kind]) => [k, card(label, kind)]),
  );
  const bytesChart = lineChart("Bytes in and out per second", [
    { label: "in", key: "bytes_in_per_s", format: (v) => rate(v, "B") },
    { label: "out", key: "bytes_out_per_s", format: (v) => rate(v, "B") },
  ]);
  const messagesChart = lineChart("Messages in and out per second", [
    { label: "in", key: "messages_in_per_s", format: (v) => rate(v) },
    { label: "out", key: "messages_out_per_s", format: (v) => rate(v) },
  ]);
  const connectionsChart = lineChart("Open connections", [{ label: "connections", key: "connections", format: (v) => num(Math.round(v * 10) / 10) }]);
  const connections = table([{ label: "Protocol", rowHeader: true }, { label: "Open connections", num: true }]);
  const filter = filterBox(() => refreshSettings(), "settings");
  const settings = table([{ label: "Setting", rowHeader: true, mono: true }, { label: "Value", mono: true }]);
  const flow = table([{ label: "Resource", rowHeader: true }, { label: "State" }, { label: "Level", num: true }, { label: "Low", num: true }, { label: "High", num: true }]);
  let lastSettings = {};
  function refreshSettings() {
    const items = Object.entries(lastSettings).filter(([k, v]) => matches(filter.input, k, JSON.stringify(v)));
    renderRows(settings, items, ([k]) => k, ([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)], "No setting matches.");
  }
  const node = h(
    "div",
    { class: "page overview" },
    pageHeader("Overview"),
    h("div", { class: "cards" }, Object.values(cards).map((c) => c.el)),
    h("div", { class: "grid" }, panel("Throughput (bytes)", bytesChart.el), panel("Throughput (messages)", messagesChart.el), panel("Connections", connectionsChart.el, connections.el)),
    h("div", { class: "grid" }, panel("Settings", filter.el, settings.el), panel("Flow control", flow.el)),
  );
  async function refresh() {
    const [overview, broker] = await Promise.all([api("GET", "/api/v1/overview").catch((e) => e), api("GET", "/api/v1/broker")]);
    knownDataDir = broker.data_dir;
    lastSettings = broker.settings || {};
    refreshSettings();
    renderRows(flow, broker.flow?.resources || [], (r) => r.name, (r) => [r.name, r.state, num(r.level), num(r.low), num(r.high)], "No flow-controlled resources.");
    setText(cards.version.value, broker.version);
    setText(cards.uptime.value, duration(broker.uptime_ms));
    setText(cards.node.value, broker.node_id);
    setText(cards.cluster.value, broker.cluster_id);
    setText(cards.topics.value, num(broker.topics));
    setText(cards.partitions.value, num(broker.partitions));
    if (overview instanceof Error) throw overview;
    setText(cards.status.value, overview.status);
    cards.status.value.className = `value status-${overview.status === "ok" ? "ok" : overview.status === "stopping" || overview.status === "degraded" ? overview.status : "bad"}`;
    setText(cards.groups.value, num(overview.groups));
    const history = overview.history || { samples: [], interval_ms: 0 };
    bytesChart.update(history.samples, history.interval_ms);
    messagesChart.update(history.samples, history.interval_ms);
    connectionsChart.update(history.samples, history.interval_ms);
    renderRows(connections, protocolRows(overview.connections), (r) => r[0], (r) => r, "");
  }
  return { title: "Overview", node, refresh, filter: filter.input };
}

function protocolRows(connections) {
  const names = { kafka: "Kafka", amqp: "AMQP 0-9-1", sqs: "SQS", total: "Total" };
  return Object.entries(connections || {})
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [names[k] || k, num(v)]);
}

function topicsPage() {
  const filter = filterBox(() => render(), "topics");
  const list = table([{ label: "Topic", rowHeader: true }, { label: "Partitions", num: true }, { label: "Records", num: true }, { label: "Size", num: true }, { label: "Retention" }, { label: "Overridden configs" }]);
  let topics = [];
  function render() {
    const shown = topics.filter((t) => matches(filter.input, t.name));
    renderRows(list, shown, (t) => t.name, (t) => [
      link(`#/topics/${encodeURIComponent(t.name)}`, t.name),
      num(t.partition_count),
      num(t.records),
      bytes(t.size_bytes),
      retention(t.configs || {}),
      Object.keys(t.configs || {}).length ? Object.entries(t.configs).map(([k, v]) => `${k}=${v}`).join(", ") : "",
    ], topics.length ? "No topic matches the filter." : "No topics yet.");
  }
  const name = h("input", { type: "text", required: true, autocomplete: "off", spellcheck: "false", pattern: "[a-zA-Z0-9._\\-]{1,249}", title: "letters, digits, dot, underscore and hyphen" });
  const count = h("input", { type: "number", min: "1", step: "1", placeholder: "broker default" });
  const create = h("button", { type: "submit" }, "Create topic");
  const form = h("form", { class: "inline", "aria-label": "Create a topic" }, field("Name", name), field("Partitions", count), h("div", { class: "buttons" }, create));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    act(create, async () => {
      const body = { name: name.value };
      if (count.value) body.partitions = Number(count.value);
      const made = await api("POST", "/api/v1/topics", body);
      showInfo(`Topic ${made.name} created with ${made.partition_count} partition(s).`);
      name.value = "";
      count.value = "";
      await refresh();
    });
  });
  const node = h("div", { class: "page topics" }, pageHeader("Topics"), h("section", { class: "panel", "aria-label": "Topics" }, h("div", { class: "toolbar" }, filter.el), list.el), panel("Create a topic", form));
  async function refresh() {
    topics = (await api("GET", "/api/v1/topics")).topics;
    render();
  }
  return { title: "Topics", node, refresh, filter: filter.input };
}

// A two-step button for destructive actions: the first press arms it, the second acts.
function dangerButton(label, action) {
  let armed = false;
  let timer = null;
  const button = h("button", { type: "button", class: "danger" }, label);
  button.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      setText(button, `Really ${label.toLowerCase()}? Press again`);
      timer = setTimeout(() => {
        armed = false;
        setText(button, label);
      }, 5000);
      return;
    }
    clearTimeout(timer);
    armed = false;
    setText(button, label);
    await act(button, action);
  });
  return button;
}

function topicPage(name) {
  const enc = encodeURIComponent(name);
  const title = h("h1", { tabindex: "-1" }, "Topic ", h("span", { class: "mono" }, name));
  const cards = Object.fromEntries([["partitions", "Partitions"], ["records", "Records"], ["size", "Size"], ["retention", "Retention"]].map(([k, l]) => [k, card(l)]));
  const partitions = table([{ label: "Partition", rowHeader: true, num: true }, { label: "Start offset", num: true }, { label: "End offset", num: true }, { label: "Records", num: true }, { label: "Size", num: true }, { label: "Segments", num: true }, { label: "State" }]);
  const configFilter = filterBox(() => renderConfigs(), "configs");
  const configs = table([{ label: "Config", rowHeader: true, mono: true }, { label: "Value", mono: true }, { label: "Source" }]);
  let configEntries = [];
  function renderConfigs() {
    const shown = configEntries.filter((c) => matches(configFilter.input, c.name, c.value));
    renderRows(configs, shown, (c) => c.name, (c) => [c.name, c.sensitive ? "(sensitive)" : c.value ?? "–", c.source], "No config matches.");
  }
  const browser = messageBrowser(name);
  const produce = produceForm(name, () => browser.showNewest());
  const trim = trimForm(name);
  const remove = dangerButton("Delete topic", async () => {
    await api("DELETE", `/api/v1/topics/${enc}`);
    showInfo(`Topic ${name} deleted.`);
    location.hash = "#/topics";
  });
  const node = h(
    "div",
    { class: "page topic" },
    h("p", { class: "breadcrumb" }, link("#/topics", "Topics"), " / ", name),
    title,
    h("div", { class: "cards" }, Object.values(cards).map((c) => c.el)),
    panel("Partitions", partitions.el),
    browser.el,
    h("div", { class: "grid" }, produce, panel("Configs", h("div", { class: "toolbar" }, configFilter.el), configs.el)),
    panel("Maintenance", trim, h("div", { class: "buttons" }, remove)),
  );
  async function refresh() {
    const [topic, described] = await Promise.all([api("GET", `/api/v1/topics/${enc}`), api("GET", `/api/v1/topics/${enc}/configs`)]);
    setText(cards.partitions.value, num(topic.partition_count));
    setText(cards.records.value, num(topic.records));
    setText(cards.size.value, bytes(topic.size_bytes));
    // The described configs hold what applies (the broker's default when not overridden).
    const effective = Object.fromEntries(described.configs.map((c) => [c.name, c.value]));
    setText(cards.retention.value, retention(effective));
    renderRows(partitions, topic.partitions, (p) => p.partition, (p) => [
      String(p.partition),
      num(p.log_start_offset),
      num(p.log_end_offset),
      num(p.log_end_offset - p.log_start_offset),
      bytes(p.size_bytes),
      num(p.segments),
      p.offline_reason ? h("span", { class: "status-bad" }, `offline: ${p.offline_reason}`) : h("span", { class: "status-ok" }, "online"),
    ], "No partitions.");
    browser.setPartitions(topic.partition_count);
    produce.setPartitions(topic.partition_count);
    trim.setPartitions(topic.partition_count);
    configEntries = described.configs;
    renderConfigs();
  }
  return { title: `Topic ${name}`, node, refresh, filter: configFilter.input, start: () => browser.showNewest() };
}

function partitionSelect(withAny, anyLabel) {
  const select = h("select", {});
  let count = -1;
  function setPartitions(n) {
    if (n === count) return;
    count = n;
    const current = select.value;
    const options = [];
    if (withAny) options.push(h("option", { value: "" }, anyLabel));
    for (let p = 0; p < n; p += 1) options.push(h("option", { value: String(p) }, String(p)));
    select.replaceChildren(...options);
    if ([...select.options].some((o) => o.value === current)) select.value = current;
  }
  return { select, setPartitions };
}

function messageBrowser(topic) {
  const enc = encodeURIComponent(topic);
  const part = partitionSelect(false);
  const mode = h("select", {}, h("option", { value: "newest" }, "newest"), h("option", { value: "offset" }, "from offset"), h("option", { value: "timestamp" }, "from time"));
  const offset = h("input", { type: "number", min: "0", step: "1", value: "0" });
  const when = h("input", { type: "datetime-local", step: "1" });
  const limit = h("input", { type: "number", min: "1", max: "1000", step: "1", value: "20" });
  const fetchButton = h("button", { type: "submit" }, "Show messages");
  const next = h("button", { type: "button", class: "quiet", disabled: true }, "Next page");
  const offsetField = field("Offset", offset);
  const whenField = field("Time (your local time)", when);
  const syncMode = () => {
    offsetField.hidden = mode.value !== "offset";
    whenField.hidden = mode.value !== "timestamp";
  };
  mode.addEventListener("change", syncMode);
  syncMode();
  const form = h("form", { class: "inline", "aria-label": "Message browser query" }, field("Partition", part.select), field("Start", mode), offsetField, whenField, field("Limit", limit), h("div", { class: "buttons" }, fetchButton, next));
  const view = h("div", { class: "toggle", role: "radiogroup", "aria-label": "Show keys and values as" });
  const group = uid("view");
  for (const [value, label] of [["text", "Text"], ["json", "JSON"], ["hex", "Hex"]]) {
    const input = h("input", { type: "radio", name: group, value, checked: value === "text" });
    input.addEventListener("change", () => renderMessages());
    view.append(h("label", {}, input, h("span", {}, label)));
  }
  const status = h("p", { class: "note", "aria-live": "polite" }, "Choose a partition and press Enter.");
  const results = table([{ label: "Offset", rowHeader: true, num: true }, { label: "Timestamp" }, { label: "Key" }, { label: "Value" }, { label: "Headers" }]);
  const el = h("section", { class: "panel message-browser", "aria-label": "Messages" }, h("h2", {}, "Messages"), form, h("div", { class: "toolbar" }, h("span", { class: "label" }, "Show as "), view), status, results.el);
  let shown = null;
  let nextOffset = null;

  function viewMode() {
    return view.querySelector("input:checked").value;
  }
  function renderMessages() {
    if (!shown) return;
    const mode = viewMode();
    results.tbody.replaceChildren();
    renderRows(results, shown.messages, (m) => m.offset, (m) => [
      String(m.offset),
      timestamp(m.timestamp_ms),
      payload(m.key, mode),
      payload(m.value, mode),
      headersCell(m.headers || [], mode),
    ], "No messages in this range.");
  }
  async function load(query) {
    const params = new URLSearchParams({ partition: part.select.value || "0", limit: limit.value || "20", ...query });
    const document = await api("GET", `/api/v1/topics/${enc}/messages?${params}`);
    shown = document;
    nextOffset = document.next_offset;
    next.disabled = !document.messages.length || document.next_offset >= document.log_end_offset;
    setText(status, `Partition ${document.partition}: offsets ${num(document.log_start_offset)} to ${num(document.log_end_offset)} (end, exclusive); showing ${document.messages.length} message${document.messages.length === 1 ? "" : "s"}.`);
    renderMessages();
  }
  function query() {
    if (mode.value === "offset") return { offset: String(offset.value || 0) };
    if (mode.value === "timestamp") {
      const ms = new Date(when.value).getTime();
      if (Number.isNaN(ms)) throw new ApiError(0, "INVALID_INPUT", "enter a date and time to start from");
      return { timestamp: String(ms) };
    }
    return {};
  }
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    act(fetchButton, () => load(query()));
  });
  next.addEventListener("click", () => act(next, () => load({ offset: String(nextOffset) })));
  return {
    el,
    setPartitions: part.setPartitions,
    showNewest: () => {
      if (mode.value === "newest" || !shown) act(null, () => load({}));
    },
  };
}

function decodeBase64(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) out[i] = raw.charCodeAt(i);
  return out;
}

function hexDump(data) {
  const lines = [];
  for (let i = 0; i < data.length; i += 16) {
    const chunk = [...data.slice(i, i + 16)];
    const hex = chunk.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = chunk.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(6, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join("\n");
}

function payloadText(data, mode) {
  if (data === null || data === undefined) return null;
  if (mode === "hex" || data.text === null || data.text === undefined) {
    const decoded = decodeBase64(data.base64);
    return decoded.length ? hexDump(decoded) : "(empty)";
  }
  if (mode === "json") {
    try {
      return JSON.stringify(JSON.parse(data.text), null, 2);
    } catch {
      return data.text;
    }
  }
  return data.text;
}

function payload(data, mode) {
  const text = payloadText(data, mode);
  if (text === null) return h("span", { class: "muted" }, "null");
  return h("pre", { class: `payload view-${mode}` }, text);
}

function headersCell(headers, mode) {
  if (!headers.length) return "";
  return h("dl", { class: "headers" }, headers.map((hd) => [h("dt", { class: "mono" }, hd.key), h("dd", {}, payload(hd.value, mode === "json" ? "text" : mode))]));
}

function produceForm(topic, produced) {
  const enc = encodeURIComponent(topic);
  const part = partitionSelect(true, "chosen by the broker");
  const key = h("input", { type: "text", autocomplete: "off", spellcheck: "false" });
  const value = h("textarea", { rows: "4", spellcheck: "false", required: true });
  const headers = h("textarea", { rows: "2", spellcheck: "false", placeholder: "name: value (one a line)" });
  const send = h("button", { type: "submit" }, "Produce");
  const result = h("p", { class: "note result", "aria-live": "polite" });
  const form = h("form", { class: "stack", "aria-label": "Produce a test message" }, field("Key (empty for none)", key), field("Value", value, "Ctrl+Enter sends."), field("Headers", headers), field("Partition", part.select), h("div", { class: "buttons" }, send), result);
  submitOnCtrlEnter(form);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    act(send, async () => {
      const body = { value: value.value };
      if (key.value) body.key = key.value;
      if (part.select.value !== "") body.partition = Number(part.select.value);
      const parsed = parseHeaders(headers.value);
      if (Object.keys(parsed).length) body.headers = parsed;
      const answer = await api("POST", `/api/v1/topics/${enc}/messages`, body);
      setText(result, `Produced to partition ${answer.partition} at offset ${answer.offset}.`);
      produced();
    });
  });
  const el = h("section", { class: "panel produce", "aria-label": "Produce a test message" }, h("h2", {}, "Produce a test message"), form);
  el.setPartitions = part.setPartitions;
  return el;
}

function parseHeaders(text) {
  const headers = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf(":");
    if (at < 0) throw new ApiError(0, "INVALID_INPUT", `a header line needs "name: value": ${JSON.stringify(line)}`);
    headers[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return headers;
}

function submitOnCtrlEnter(form) {
  form.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && e.target.tagName === "TEXTAREA") {
      e.preventDefault();
      form.requestSubmit();
    }
  });
}

function trimForm(topic) {
  const enc = encodeURIComponent(topic);
  const part = partitionSelect(true, "every partition");
  const before = h("input", { type: "number", min: "0", step: "1", required: true });
  const button = h("button", { type: "submit", class: "danger" }, "Trim");
  const result = h("p", { class: "note result", "aria-live": "polite" });
  const form = h("form", { class: "inline", "aria-label": "Trim the log" }, field("Partition", part.select), field("Delete records before offset", before), h("div", { class: "buttons" }, button));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    act(button, async () => {
      const body = { before_offset: Number(before.value) };
      if (part.select.value !== "") body.partition = Number(part.select.value);
      const answer = await api("POST", `/api/v1/topics/${enc}/trim`, body);
      const starts = (answer?.partitions || []).map((p) => `partition ${p.partition} now starts at offset ${num(p.log_start_offset)}`);
      setText(result, starts.length ? `Trimmed: ${starts.join("; ")}.` : "Trimmed.");
    });
  });
  const el = h("div", {}, h("p", { class: "note" }, "Trimming deletes records for good; it needs the admin token."), form, result);
  el.setPartitions = part.setPartitions;
  return el;
}

function groupsPage() {
  const filter = filterBox(() => render(), "groups");
  const list = table([{ label: "Group", rowHeader: true }, { label: "Kind" }, { label: "State" }, { label: "Members", num: true }, { label: "Lag", num: true }, { label: "Protocol" }]);
  let groups = [];
  function render() {
    const shown = groups.filter((g) => matches(filter.input, g.group_id, g.state));
    renderRows(list, shown, (g) => g.group_id, (g) => [link(`#/groups/${encodeURIComponent(g.group_id)}`, g.group_id), g.kind, g.state, num(g.member_count), num(g.lag), g.protocol || ""], groups.length ? "No group matches the filter." : "No consumer groups yet.");
  }
  const node = h("div", { class: "page groups" }, pageHeader("Consumer groups"), h("section", { class: "panel", "aria-label": "Consumer groups" }, h("div", { class: "toolbar" }, filter.el), list.el));
  async function refresh() {
    groups = (await api("GET", "/api/v1/groups")).groups;
    groups.sort((a, b) => a.group_id.localeCompare(b.group_id));
    render();
  }
  return { title: "Consumer groups", node, refresh, filter: filter.input };
}

function groupPage(group) {
  const enc = encodeURIComponent(group);
  const cards = Object.fromEntries([["state", "State"], ["kind", "Kind"], ["members", "Members"], ["lag", "Total lag"], ["generation", "Generation"]].map(([k, l]) => [k, card(l)]));
  const members = table([{ label: "Member", rowHeader: true, mono: true }, { label: "Client id" }, { label: "Host" }, { label: "Instance id" }, { label: "Assignment" }]);
  const filter = filterBox(() => renderPartitions(), "partitions");
  const partitions = table([{ label: "Topic", rowHeader: true }, { label: "Partition", num: true }, { label: "Committed", num: true }, { label: "Log end", num: true }, { label: "Lag", num: true }, { label: "Member", mono: true }]);
  const lagChart = barChart("Lag per partition");
  const shares = table([{ label: "Topic", rowHeader: true }, { label: "Partition", num: true }, { label: "Available", num: true }, { label: "In flight", num: true }, { label: "Acknowledged", num: true }, { label: "Oldest unacknowledged" }, { label: "Delivered", num: true }, { label: "Dead lettered", num: true }]);
  const sharesPanel = panel("Share partitions", shares.el);
  sharesPanel.hidden = true;
  const reset = offsetResetForm(group);
  const remove = dangerButton("Delete group", async () => {
    await api("DELETE", `/api/v1/groups/${enc}`);
    showInfo(`Group ${group} deleted.`);
    location.hash = "#/groups";
  });
  let detail = null;
  function renderPartitions() {
    const shown = (detail?.partitions || []).filter((p) => matches(filter.input, p.topic, `${p.topic}/${p.partition}`));
    renderRows(partitions, shown, (p) => `${p.topic}\u0000${p.partition}`, (p) => [link(`#/topics/${encodeURIComponent(p.topic)}`, p.topic), String(p.partition), num(p.committed_offset), num(p.log_end_offset), num(p.lag), p.member_id || ""], "No committed or assigned partitions.");
  }
  const node = h(
    "div",
    { class: "page group" },
    h("p", { class: "breadcrumb" }, link("#/groups", "Consumer groups"), " / ", group),
    h("h1", { tabindex: "-1" }, "Group ", h("span", { class: "mono" }, group)),
    h("div", { class: "cards" }, Object.values(cards).map((c) => c.el)),
    h("div", { class: "grid" }, panel("Lag per partition", lagChart.el), panel("Members", members.el)),
    panel("Partitions", h("div", { class: "toolbar" }, filter.el), partitions.el),
    sharesPanel,
    reset.el,
    panel("Maintenance", h("p", { class: "note" }, "A group can be deleted only while it has no members."), h("div", { class: "buttons" }, remove)),
  );
  async function refresh() {
    detail = await api("GET", `/api/v1/groups/${enc}`);
    setText(cards.state.value, detail.state);
    setText(cards.kind.value, detail.kind);
    setText(cards.members.value, num(detail.member_count));
    setText(cards.lag.value, num(detail.lag));
    setText(cards.generation.value, num(detail.generation));
    renderRows(members, detail.members, (m) => m.member_id, (m) => [m.member_id, m.client_id, m.client_host, m.group_instance_id || "", m.assignment.map((a) => `${a.topic}/${a.partition}`).join(", ")], "No members: the group is empty.");
    renderPartitions();
    lagChart.update(detail.partitions.map((p) => ({ label: `${p.topic}/${p.partition}`, value: p.lag })));
    const shared = detail.share_partitions || [];
    sharesPanel.hidden = !shared.length;
    renderRows(shares, shared, (p) => `${p.topic}\u0000${p.partition}`, (p) => [p.topic, String(p.partition), num(p.available), num(p.acquired), num(p.acknowledged), duration(p.oldest_unacknowledged_age_ms), num(p.delivered), num(p.dead_lettered)], "");
    reset.setTopics([...new Set(detail.partitions.map((p) => p.topic))].sort(), detail.member_count);
  }
  return { title: `Group ${group}`, node, refresh, filter: filter.input };
}

function offsetResetForm(group) {
  const enc = encodeURIComponent(group);
  const to = h("select", {}, ["earliest", "latest", "timestamp", "offset", "shift"].map((v) => h("option", { value: v }, v)));
  const value = h("input", { type: "number", step: "1" });
  const when = h("input", { type: "datetime-local", step: "1" });
  const topic = h("select", {}, h("option", { value: "" }, "every topic of the group"));
  const partitionsInput = h("input", { type: "text", placeholder: "all", inputmode: "numeric", autocomplete: "off" });
  const valueField = field("Value", value);
  const whenField = field("Time (your local time)", when);
  const preview = h("button", { type: "submit" }, "Preview (dry run)");
  const apply = h("button", { type: "button", class: "danger", disabled: true }, "Apply");
  const status = h("p", { class: "note", "aria-live": "polite" }, "Preview a reset first; Apply then commits exactly what the preview showed.");
  const result = table([{ label: "Topic", rowHeader: true }, { label: "Partition", num: true }, { label: "Current", num: true }, { label: "New", num: true }]);
  result.el.hidden = true;
  const valueLabel = valueField.querySelector("label");
  const sync = () => {
    valueField.hidden = !["offset", "shift"].includes(to.value);
    whenField.hidden = to.value !== "timestamp";
    setText(valueLabel, to.value === "shift" ? "Shift by (negative goes back)" : "Offset");
  };
  to.addEventListener("change", sync);
  sync();
  const form = h("form", { class: "inline", "aria-label": "Reset offsets" }, field("Reset to", to), valueField, whenField, field("Topic", topic), field("Partitions (comma separated)", partitionsInput), h("div", { class: "buttons" }, preview, apply));
  let previewed = null;
  form.addEventListener("input", () => {
    previewed = null;
    apply.disabled = true;
  });
  form.addEventListener("change", () => {
    previewed = null;
    apply.disabled = true;
  });
  function body() {
    const request = { to: to.value };
    if (to.value === "offset" || to.value === "shift") {
      if (value.value === "") throw new ApiError(0, "INVALID_INPUT", `enter the ${to.value === "shift" ? "shift" : "offset"}`);
      request.value = Number(value.value);
    }
    if (to.value === "timestamp") {
      const ms = new Date(when.value).getTime();
      if (Number.isNaN(ms)) throw new ApiError(0, "INVALID_INPUT", "enter the date and time to reset to");
      request.value = ms;
    }
    if (topic.value) request.topic = topic.value;
    const parts = partitionsInput.value.split(",").map((p) => p.trim()).filter(Boolean);
    if (parts.length) {
      if (parts.some((p) => !/^[0-9]+$/.test(p))) throw new ApiError(0, "INVALID_INPUT", "partitions are numbers separated by commas");
      request.partitions = parts.map(Number);
    }
    return request;
  }
  function show(answer) {
    result.el.hidden = false;
    renderRows(result, answer.partitions, (p) => `${p.topic}\u0000${p.partition}`, (p) => [p.topic, String(p.partition), num(p.current), num(p.new)], "No partition to reset.");
  }
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    act(preview, async () => {
      const request = body();
      const answer = await api("POST", `/api/v1/groups/${enc}/offsets`, { ...request, dry_run: true });
      show(answer);
      previewed = request;
      apply.disabled = false;
      setText(status, `Dry run: ${answer.partitions.length} partition(s) would move. Press Apply to commit.`);
    });
  });
  apply.addEventListener("click", () =>
    act(apply, async () => {
      if (!previewed) return;
      const answer = await api("POST", `/api/v1/groups/${enc}/offsets`, { ...previewed, dry_run: false });
      show(answer);
      previewed = null;
      setText(status, `Applied: ${answer.partitions.length} partition(s) reset.`);
      showInfo(`Offsets of group ${group} reset.`);
    }).finally(() => {
      apply.disabled = previewed === null;
    }),
  );
  const membersNote = h("p", { class: "note" });
  const el = panel("Reset offsets", membersNote, form, status, result.el);
  el.classList.add("offset-reset");
  function setTopics(topics, memberCount) {
    const current = topic.value;
    const wanted = ["", ...topics];
    const have = [...topic.options].map((o) => o.value);
    if (JSON.stringify(have) !== JSON.stringify(wanted)) {
      topic.replaceChildren(h("option", { value: "" }, "every topic of the group"), ...topics.map((t) => h("option", { value: t }, t)));
      if (wanted.includes(current)) topic.value = current;
    }
    setText(membersNote, memberCount ? `The group has ${memberCount} member(s): the broker refuses a reset until they leave.` : "The group is empty, so its offsets can be reset.");
  }
  return { el, setTopics };
}

function exchangesPage() {
  const filter = filterBox(() => render(), "exchanges");
  const list = table([{ label: "Exchange", rowHeader: true }, { label: "Type" }, { label: "Partitions", num: true }, { label: "Bindings", num: true }, { label: "Alternate" }, { label: "Unroutable" }]);
  let exchanges = [];
  function render() {
    const shown = exchanges.filter((x) => matches(filter.input, x.name, x.type));
    renderRows(list, shown, (x) => x.name, (x) => [link(`#/exchanges/${encodeURIComponent(x.name)}`, x.name), x.type, num(x.partition_count), num(x.binding_count), x.alternate || "", x.unroutable], exchanges.length ? "No exchange matches the filter." : "No exchanges yet.");
  }
  const node = h("div", { class: "page exchanges" }, pageHeader("Exchanges"), h("section", { class: "panel", "aria-label": "Exchanges" }, h("div", { class: "toolbar" }, filter.el), list.el));
  async function refresh() {
    exchanges = (await api("GET", "/api/v1/exchanges")).exchanges;
    render();
  }
  return { title: "Exchanges", node, refresh, filter: filter.input };
}

function exchangePage(name) {
  const enc = encodeURIComponent(name);
  const cards = Object.fromEntries([["type", "Type"], ["partitions", "Partitions"], ["routed", "Routed records"], ["unroutable", "Unroutable"], ["lag", "Routing lag"]].map(([k, l]) => [k, card(l)]));
  const filter = filterBox(() => render(), "bindings");
  const bindings = table([{ label: "Destination", rowHeader: true }, { label: "Kind" }, { label: "Key", mono: true }, { label: "Arguments", mono: true }, { label: "Expression", mono: true }]);
  let detail = null;
  function render() {
    const shown = (detail?.bindings || []).filter((b) => matches(filter.input, b.destination, b.key));
    renderRows(bindings, shown, (b) => JSON.stringify(b), (b) => [b.destination_kind === "topic" || b.destination_kind === "queue" ? link(`#/topics/${encodeURIComponent(b.destination)}`, b.destination) : b.destination, b.destination_kind, b.key, Object.keys(b.arguments || {}).length ? JSON.stringify(b.arguments) : "", b.expression || ""], "No bindings.");
  }
  const node = h(
    "div",
    { class: "page exchange" },
    h("p", { class: "breadcrumb" }, link("#/exchanges", "Exchanges"), " / ", name),
    h("h1", { tabindex: "-1" }, "Exchange ", h("span", { class: "mono" }, name)),
    h("div", { class: "cards" }, Object.values(cards).map((c) => c.el)),
    panel("Bindings", h("div", { class: "toolbar" }, filter.el), bindings.el),
    panel(
      "Maintenance",
      h("p", { class: "note" }, "Deleting an exchange deletes its topic and every binding leaving it."),
      h("div", { class: "buttons" }, dangerButton("Delete exchange", async () => {
        await api("DELETE", `/api/v1/exchanges/${enc}`);
        showInfo(`Exchange ${name} deleted.`);
        location.hash = "#/exchanges";
      })),
    ),
  );
  async function refresh() {
    detail = await api("GET", `/api/v1/exchanges/${enc}`);
    setText(cards.type.value, detail.type);
    setText(cards.partitions.value, num(detail.partition_count));
    setText(cards.routed.value, num(detail.stats?.routed_records));
    setText(cards.unroutable.value, num(detail.stats?.unroutable_records));
    setText(cards.lag.value, num(detail.routing_lag_records));
    render();
  }
  return { title: `Exchange ${name}`, node, refresh, filter: filter.input };
}

function queuesPage() {
  const filter = filterBox(() => render(), "queues");
  const list = table([{ label: "Group", rowHeader: true }, { label: "Topic" }, { label: "Partition", num: true }, { label: "Available", num: true }, { label: "In flight", num: true }, { label: "Oldest unacknowledged" }, { label: "Delivered", num: true }, { label: "Dead lettered", num: true }, { label: "Dead-letter topic" }, { label: "Action" }]);
  let queues = [];
  const from = h("input", { type: "text", required: true, autocomplete: "off", spellcheck: "false" });
  const to = h("input", { type: "text", required: true, autocomplete: "off", spellcheck: "false" });
  const preview = h("button", { type: "submit" }, "Preview (dry run)");
  const apply = h("button", { type: "button", class: "danger" }, "Redrive");
  const status = h("p", { class: "note", "aria-live": "polite" }, "Moves the records of a dead-letter topic back to the topic they came from.");
  const form = h("form", { class: "inline", "aria-label": "Redrive a dead-letter topic" }, field("Dead-letter topic", from), field("Back to topic", to), h("div", { class: "buttons" }, preview, apply));
  async function redrive(dryRun) {
    if (!from.value || !to.value) throw new ApiError(0, "INVALID_INPUT", "name the dead-letter topic and the topic to move its records to");
    const answer = await api("POST", `/api/v1/topics/${encodeURIComponent(from.value)}/redrive`, { to: to.value, dry_run: dryRun });
    const remaining = answer.remaining === undefined ? "" : `, ${num(answer.remaining)} remaining`;
    setText(status, `${dryRun ? "Dry run: would move" : "Moved"} ${num(answer.moved)} record(s) from ${answer.from} to ${answer.to}${remaining}.`);
  }
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    act(preview, () => redrive(true));
  });
  apply.addEventListener("click", () => act(apply, () => redrive(false)));
  function render() {
    const shown = queues.filter((q) => matches(filter.input, q.group, q.topic, q.dead_letter_topic));
    renderRows(list, shown, (q) => `${q.group}\u0000${q.topic}\u0000${q.partition}`, (q) => [
      link(`#/groups/${encodeURIComponent(q.group)}`, q.group),
      link(`#/topics/${encodeURIComponent(q.topic)}`, q.topic),
      String(q.partition),
      num(q.available),
      num(q.in_flight),
      duration(q.oldest_unacknowledged_age_ms),
      num(q.delivered),
      num(q.dead_lettered),
      q.dead_letter_topic ? link(`#/topics/${encodeURIComponent(q.dead_letter_topic)}`, q.dead_letter_topic) : "",
      q.dead_letter_topic
        ? h("button", { type: "button", class: "quiet", onclick: () => {
            from.value = q.dead_letter_topic;
            to.value = q.topic;
            from.focus();
          } }, "Redrive…")
        : "",
    ], queues.length ? "No queue matches the filter." : "No queues: share groups appear here once they have consumed.");
  }
  const node = h("div", { class: "page queues" }, pageHeader("Queues"), h("p", { class: "note" }, "Share groups (Kafka queues, AMQP queues and SQS queues): what waits, what is out with a consumer, and what was dead-lettered."), h("section", { class: "panel", "aria-label": "Queues" }, h("div", { class: "toolbar" }, filter.el), list.el), panel("Redrive a dead-letter topic", form, status));
  async function refresh() {
    queues = (await api("GET", "/api/v1/queues")).queues;
    render();
  }
  return { title: "Queues", node, refresh, filter: filter.input };
}

function connectionsPage() {
  const counts = table([{ label: "Protocol", rowHeader: true }, { label: "Open connections", num: true }]);
  const totals = table([{ label: "Counter", rowHeader: true }, { label: "Value", num: true }]);
  const details = h("div", {});
  const node = h("div", { class: "page connections" }, pageHeader("Connections"), h("div", { class: "grid" }, panel("Open connections per protocol", counts.el), panel("Since the broker started", totals.el)), details);
  const detailTables = new Map();
  async function refresh() {
    const [document, broker] = await Promise.all([api("GET", "/api/v1/connections"), api("GET", "/api/v1/broker")]);
    renderRows(counts, protocolRows(document.connections), (r) => r[0], (r) => r, "No connections.");
    const c = broker.connections || {};
    renderRows(totals, [["Open", c.open], ["Accepted", c.accepted_total], ["Closed for errors", c.closed_for_errors_total]], (r) => r[0], (r) => [r[0], num(r[1])], "");
    // Any list of objects the endpoint adds (one row per connection) gets a table of its own.
    for (const [key, value] of Object.entries(document)) {
      if (!Array.isArray(value) || (value.length && typeof value[0] !== "object")) continue;
      const columns = [...new Set(value.flatMap((row) => Object.keys(row)))];
      let entry = detailTables.get(key);
      if (!entry || entry.names.join() !== columns.join()) {
        const tbl = table(columns.map((name, i) => ({ label: name.replaceAll("_", " "), rowHeader: i === 0 })));
        const section = panel(key.replaceAll("_", " "), tbl.el);
        if (entry) entry.section.replaceWith(section);
        else details.append(section);
        entry = { names: columns, tbl, section };
        detailTables.set(key, entry);
      }
      renderRows(entry.tbl, value, (row) => JSON.stringify(row), (row) => columns.map((name) => (typeof row[name] === "object" && row[name] !== null ? JSON.stringify(row[name]) : row[name] ?? "")), "None.");
    }
  }
  return { title: "Connections", node, refresh };
}

function notFoundPage(path) {
  const node = h("div", { class: "page" }, pageHeader("No such page"), h("p", {}, `Nothing lives at #${path}. `, link("#/overview", "Go to the overview.")));
  return { title: "No such page", node, refresh: async () => {} };
}

const ROUTES = [
  [/^\/?$/, "overview", () => overviewPage()],
  [/^\/overview$/, "overview", () => overviewPage()],
  [/^\/topics$/, "topics", () => topicsPage()],
  [/^\/topics\/([^/]+)$/, "topics", (m) => topicPage(m[1])],
  [/^\/groups$/, "groups", () => groupsPage()],
  [/^\/groups\/([^/]+)$/, "groups", (m) => groupPage(m[1])],
  [/^\/exchanges$/, "exchanges", () => exchangesPage()],
  [/^\/exchanges\/([^/]+)$/, "exchanges", (m) => exchangePage(m[1])],
  [/^\/queues$/, "queues", () => queuesPage()],
  [/^\/connections$/, "connections", () => connectionsPage()],
];

// --- routing and polling --------------------------------------------------------------------

let current = null;
let generation = 0;
let pollTimer = null;
let firstShow = true;

function route() {
  const path = location.hash.replace(/^#/, "") || "/overview";
  for (const [pattern, nav, make] of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    let decoded;
    try {
      decoded = [...match].map((part, i) => (i ? decodeURIComponent(part) : part));
    } catch {
      return show(notFoundPage(path), null);
    }
    return show(make(decoded), nav);
  }
  return show(notFoundPage(path), null);
}

function show(page, nav) {
  generation += 1;
  clearTimeout(pollTimer);
  // Errors belong to the page they happened on; notes ("topic deleted") outlive it.
  for (const [key, item] of [...alerts]) if (!item.classList.contains("info")) clearAlert(key);
  current = page;
  document.title = `${page.title} · WeirMQ`;
  for (const a of document.querySelectorAll("nav a[data-page]")) {
    if (a.dataset.page === nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const main = document.getElementById("main");
  main.replaceChildren(page.node);
  const heading = page.node.querySelector("h1");
  // Focus moves to the new page's heading, so Tab continues from there and a screen reader
  // announces it; not on the first load, where nothing was focused yet.
  if (heading && !firstShow) heading.focus({ preventScroll: true });
  firstShow = false;
  window.scrollTo(0, 0);
  poll(generation);
  if (page.start) page.start();
}

async function poll(mine) {
  if (mine !== generation) return;
  const live = document.getElementById("live");
  if (document.hidden) {
    live.classList.add("paused");
    setText(live, "paused");
    return; // visibilitychange starts it again
  }
  live.classList.remove("paused");
  setText(live, "live");
  try {
    await current.refresh();
    if (mine !== generation) return;
    clearAlert("poll:page");
    live.classList.remove("failing");
  } catch (error) {
    if (mine !== generation) return;
    live.classList.add("failing");
    showError(error, "poll:page");
  }
  if (mine === generation) pollTimer = setTimeout(() => poll(mine), POLL_MS);
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && current) {
    clearTimeout(pollTimer);
    poll(generation);
  }
});

// --- keyboard -------------------------------------------------------------------------------

let chordStarted = 0;

function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

document.addEventListener("keydown", (e) => {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
  if (document.querySelector("dialog[open]")) return;
  const now = Date.now();
  if (chordStarted && now - chordStarted < CHORD_MS && GO_KEYS[e.key]) {
    chordStarted = 0;
    e.preventDefault();
    location.hash = GO_KEYS[e.key];
    return;
  }
  chordStarted = 0;
  if (e.key === "g") {
    chordStarted = now;
  } else if (e.key === "/") {
    const box = current?.filter || document.querySelector("main .page-filter");
    if (box) {
      e.preventDefault();
      box.focus();
      box.select();
    }
  } else if (e.key === "?") {
    e.preventDefault();
    document.getElementById("help").showModal();
  }
});

// --- start ----------------------------------------------------------------------------------

function start() {
  const help = document.getElementById("help");
  document.getElementById("help-form").addEventListener("submit", (e) => {
    e.preventDefault();
    help.close();
  });
  document.getElementById("help-button").addEventListener("click", () => help.showModal());
  document.getElementById("token-button").addEventListener("click", () => {
    tokenDeclined = false;
    askToken(storedToken() ? "A token is stored for this tab; enter another to replace it." : "Enter the admin token for destructive actions.");
  });
  document.getElementById("token-forget").addEventListener("click", () => {
    storeToken(null);
    showInfo("The stored token is forgotten.", "token");
    document.getElementById("token-dialog").close();
  });
  window.addEventListener("hashchange", route);
  route();
}

start();
