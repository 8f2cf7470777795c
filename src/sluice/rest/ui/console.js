// The sluice web console: plain JavaScript over the worker's REST API (/v1 and /plugin/config).
// Views are chosen by the URL's hash: #/ (connectors), #/connector/NAME, #/new, #/topics,
// #/topic/NAME, #/cluster. Every value from the server is inserted as text, never as HTML.
// Throughput and lag sparklines come from /metrics, sampled every 2 s into a small in-browser
// history (the last two minutes); the console keeps nothing on the server.
// Credentials: with rest.auth=basic the browser asks for them; with rest.auth=token the console
// shows a login form on the first 401 and keeps the token in sessionStorage (this tab only, gone
// when it closes), sent as "Authorization: Bearer"; "Log out" forgets it.
"use strict";

const main = document.getElementById("main");

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// -- credentials (rest.auth=token) ---------------------------------------------------------------
const TOKEN_KEY = "sluice.token";

class LoginNeeded extends Error {}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

// fetch() with the stored bearer token, if any; a 401 asking for a bearer token means: log in.
async function authFetch(path, init) {
  const t = token();
  const request = { credentials: "same-origin", ...init, headers: { ...(init || {}).headers } };
  if (t) request.headers.Authorization = `Bearer ${t}`;
  const response = await fetch(path, request);
  const challenge = response.headers.get("WWW-Authenticate") || "";
  if (response.status === 401 && challenge.toLowerCase().startsWith("bearer")) {
    throw new LoginNeeded(t ? "That token was refused." : "");
  }
  return response;
}

function showLogout() {
  const slot = document.getElementById("session");
  slot.replaceChildren(token() ? h("button", { type: "button", id: "logout", onclick: () => {
    sessionStorage.removeItem(TOKEN_KEY);
    document.getElementById("worker").textContent = ""; // shown with the token: gone with it
    showLogout();
    render(true);
  } }, "Log out") : "");
}

function loginView(problem) {
  const input = h("input", { type: "password", id: "token", name: "token", required: true,
    autocomplete: "current-password", "aria-describedby": "token-problem" });
  const form = h("form", { id: "login", onsubmit: (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    showLogout();
    render(true);
    loadWorkers();
  } },
    h("div", { class: "field" }, h("label", { for: "token" }, "Token"), input,
      h("small", { id: "token-problem", class: "error" }, problem || "")),
    h("button", { type: "submit" }, "Log in"));
  setTimeout(() => input.focus(), 0);
  return [h("h1", {}, "Log in"),
    h("p", {}, "This worker asks for a bearer token (rest.auth=token). It is kept in this tab only."),
    form];
}

async function api(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await authFetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
  if (!response.ok) {
    const message = (data && data.message) || `${response.status} ${response.statusText}`;
    throw new Error(message);
  }
  return data;
}

function flash(message, kind) {
  const el = document.getElementById("flash");
  el.textContent = message;
  el.className = kind || "info";
}

function firstLine(text) {
  return text ? String(text).split("\n")[0] : "";
}

function stateBadge(state) {
  return h("span", { class: `state state-${(state || "").toLowerCase()}` }, state || "?");
}

function enc(name) { return encodeURIComponent(name); }

// A RUNNING task riding out an outage carries "retrying": {since, attempts, error}.
function retryingText(task) {
  const r = task.retrying;
  if (!r) return "";
  const since = new Date(r.since).toLocaleTimeString();
  return `retrying since ${since} (${r.attempts} ${r.attempts === 1 ? "retry" : "retries"}): ${r.error}`;
}

function taskState(task) {
  return [stateBadge(task.state),
    task.retrying ? h("span", { class: "retrying", title: retryingText(task) }, " retrying") : null];
}

// -- live figures: /metrics sampled into a history per connector -------------------------------
const SAMPLE_MS = 2000;
const HISTORY = 60; // samples kept: two minutes
const history = {}; // connector -> { total, at, rate: [records/s], lag: [n], unit }
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/;

// One exposition line as [name, labels, value] (null for comments and blank lines).
function parseSample(line) {
  if (!line || line[0] === "#") return null;
  const brace = line.indexOf("{");
  const space = line.lastIndexOf(" ");
  if (brace < 0) return [line.slice(0, space), {}, Number(line.slice(space + 1))];
  const labels = {};
  let rest = line.slice(brace + 1);
  let m;
  while ((m = LABEL.exec(rest))) {
    labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    rest = rest.slice(m[0].length);
  }
  return [line.slice(0, brace), labels, Number(rest.slice(rest.indexOf("}") + 1))];
}

// Per connector: records so far, and its lag (a sink's largest queue lag; a source's bytes or
// records left, summed over its partitions).
function figures(text) {
  const out = {};
  const of = (name) => (out[name] = out[name] || { total: 0, lag: 0, unit: "records" });
  for (const line of text.split("\n")) {
    const sample = parseSample(line);
    if (!sample || !sample[1].connector) continue;
    const [metric, labels, value] = sample;
    const f = of(labels.connector);
    if (metric === "sluice_source_record_poll_total" || metric === "sluice_sink_record_read_total") f.total = value;
    else if (metric === "sluice_sink_record_lag_max") f.lag = value;
    else if (metric === "sluice_source_lag_bytes") { f.lag += value; f.unit = "bytes"; }
    else if (metric === "sluice_source_lag_records") f.lag += value;
  }
  return out;
}

async function sampleMetrics() {
  const response = await authFetch("/metrics");
  if (!response.ok) return;
  const now = Date.now();
  const seen = figures(await response.text());
  for (const [name, f] of Object.entries(seen)) {
    const hist = history[name] || (history[name] = { total: f.total, at: now, rate: [], lag: [] });
    const seconds = (now - hist.at) / 1000;
    // a total that went down is a connector deleted and created again: no rate for that step
    const rate = seconds > 0 && f.total >= hist.total ? (f.total - hist.total) / seconds : 0;
    if (hist.rate.length || hist.at !== now) hist.rate.push(rate);
    hist.lag.push(f.lag);
    for (const series of [hist.rate, hist.lag]) series.splice(0, Math.max(0, series.length - HISTORY));
    Object.assign(hist, { total: f.total, at: now, unit: f.unit });
  }
  for (const name of Object.keys(history)) if (!(name in seen)) delete history[name];
  drawSparklines();
}

function amount(value, unit) {
  if (unit !== "bytes") return `${Math.round(value).toLocaleString("en")} rec`;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i += 1; }
  return `${i ? value.toFixed(1) : Math.round(value)} ${units[i]}`;
}

const SVG = "http://www.w3.org/2000/svg";

// A sparkline of `values` (newest right) as inline SVG; its last value and peak as data-*.
function sparkline(values, label) {
  const width = 120, height = 24;
  const svg = document.createElementNS(SVG, "svg");
  const peak = Math.max(0, ...values);
  const last = values.length ? values[values.length - 1] : 0;
  for (const [k, v] of Object.entries({ width, height, class: "spark", role: "img",
    "aria-label": label, "data-last": last, "data-peak": peak, "data-points": values.length })) {
    svg.setAttribute(k, String(v));
  }
  const scale = peak > 0 ? peak : 1;
  const step = (width - 2) / (HISTORY - 1);
  const offset = (HISTORY - values.length) * step + 1;
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", values.map((v, i) =>
    `${(offset + i * step).toFixed(1)},${(height - 2 - (v / scale) * (height - 4)).toFixed(1)}`).join(" "));
  svg.append(line);
  return svg;
}

function liveCell(name, kind) {
  return h("td", { class: "live", "data-connector": name, "data-kind": kind });
}

// Fill the list's live cells from the history (called after each sample and each render).
function drawSparklines() {
  for (const cell of document.querySelectorAll("td.live")) {
    const hist = history[cell.dataset.connector];
    if (!hist) { cell.replaceChildren("…"); continue; }
    const rate = cell.dataset.kind === "rate";
    const values = rate ? hist.rate : hist.lag;
    const last = values.length ? values[values.length - 1] : 0;
    const text = rate ? `${last.toFixed(1)} rec/s` : amount(last, hist.unit);
    const label = rate ? `throughput, now ${text}` : `lag, now ${text}`;
    cell.replaceChildren(sparkline(values, label), h("span", { class: "figure" }, text));
  }
}

// -- connectors ---------------------------------------------------------------------------------
async function connectorsView() {
  const all = await api("GET", "/v1/connectors?expand=status");
  const names = Object.keys(all).sort();
  const rows = names.map((name) => {
    const st = all[name].status;
    const failure = firstLine(st.connector.trace) ||
      firstLine((st.tasks.find((t) => t.trace) || {}).trace) ||
      retryingText(st.tasks.find((t) => t.retrying) || {});
    return h("tr", {},
      h("td", {}, h("a", { href: `#/connector/${enc(name)}` }, name)),
      h("td", {}, st.type),
      h("td", {}, stateBadge(st.connector.state)),
      h("td", {}, st.tasks.map((t) =>
        h("span", { class: "task" }, `task ${t.id}: ${t.state}`, t.retrying ? " (retrying)" : ""))),
      liveCell(name, "rate"),
      liveCell(name, "lag"),
      h("td", { class: "failure" }, failure));
  });
  return [
    h("h1", {}, "Connectors"),
    names.length ? h("table", { id: "connectors" },
      h("thead", {}, h("tr", {}, ["Name", "Type", "State", "Tasks", "Throughput", "Lag", "Failure / note"]
        .map((x) => h("th", {}, x)))),
      h("tbody", {}, rows))
      : h("p", {}, "No connectors yet. ", h("a", { href: "#/new" }, "Create one")),
  ];
}

// -- one connector ------------------------------------------------------------------------------
async function connectorView(name) {
  const [status, config, offsets] = await Promise.all([
    api("GET", `/v1/connectors/${enc(name)}/status`),
    api("GET", `/v1/connectors/${enc(name)}/config`),
    api("GET", `/v1/connectors/${enc(name)}/offsets`),
  ]);
  const state = status.connector.state;
  const act = (label, method, path, confirmText) => h("button", {
    type: "button",
    onclick: async () => {
      if (confirmText && !window.confirm(confirmText)) return;
      try {
        await api(method, path);
        flash(`${label}: done`, "info");
        if (method === "DELETE" && path === `/v1/connectors/${enc(name)}`) location.hash = "#/";
        else render();
      } catch (e) { flash(`${label}: ${e.message}`, "error"); }
    },
  }, label);
  const base = `/v1/connectors/${enc(name)}`;
  const buttons = h("div", { class: "actions" },
    act("Pause", "PUT", `${base}/pause`),
    act("Resume", "PUT", `${base}/resume`),
    act("Restart", "POST", `${base}/restart`),
    act("Stop", "PUT", `${base}/stop`),
    state === "STOPPED" ? act("Reset offsets", "DELETE", `${base}/offsets`, `Reset the offsets of ${name}?`) : null,
    act("Delete", "DELETE", base, `Delete connector ${name}?`));
  const parts = [
    h("h1", {}, name, " ", stateBadge(state)),
    buttons,
    status.connector.trace ? h("pre", { class: "trace" }, status.connector.trace) : null,
    h("h2", {}, "Tasks"),
    h("table", { id: "tasks" }, h("tbody", {}, status.tasks.map((t) =>
      h("tr", {}, h("td", {}, `task ${t.id}`), h("td", {}, taskState(t)),
        t.trace ? h("td", { class: "failure" }, firstLine(t.trace))
          : h("td", { class: "note" }, retryingText(t)))))),
    h("h2", {}, "Config"),
    h("table", { id: "config" }, h("tbody", {}, Object.keys(config).sort().map((k) =>
      h("tr", {}, h("th", {}, k), h("td", {}, config[k]))))),
    h("h2", {}, "Positions"),
    offsets.offsets.length ? h("table", { id: "offsets" }, h("tbody", {}, offsets.offsets.map((o) =>
      h("tr", {}, h("td", {}, JSON.stringify(o.partition)), h("td", {}, JSON.stringify(o.offset))))))
      : h("p", {}, "No stored positions."),
  ];
  const dlq = config["errors.deadletterqueue.topic.name"];
  if (dlq) {
    parts.push(h("h2", {}, `Dead letters (${dlq})`));
    try {
      parts.push(recordsTable(await api("GET", `/v1/topics/${enc(dlq)}/records?limit=10`), "dead-letters"));
    } catch (e) {
      parts.push(h("p", {}, `No dead letters yet (${e.message}).`));
    }
  }
  return parts;
}

function recordsTable(body, id) {
  if (!body.records.length) return h("p", {}, "No records.");
  return h("table", { id, class: "records" },
    h("thead", {}, h("tr", {}, ["Position", "Timestamp", "Key", "Value", "Headers"].map((x) => h("th", {}, x)))),
    h("tbody", {}, body.records.map((r) => h("tr", {},
      h("td", {}, `queue ${r.queue} @ ${r.offset}`),
      h("td", {}, r.timestamp || ""),
      h("td", {}, typeof r.key === "string" ? r.key : JSON.stringify(r.key)),
      h("td", {}, typeof r.value === "string" ? r.value : JSON.stringify(r.value)),
      h("td", {}, h("dl", { class: "headers" }, Object.keys(r.headers).sort().map((k) =>
        [h("dt", {}, k), h("dd", {}, r.headers[k])])))))));
}

// -- create -------------------------------------------------------------------------------------
// Keys the form asks once, above the class's own keys: never as fields of their own.
const FORM_KEYS = new Set(["name", "connector.class"]);

function shortName(className) { return className.slice(className.lastIndexOf(".") + 1); }

// The class picker: short names grouped sources / sinks, each with its one-line summary; the
// option's value is the full class name (what the config stores).
function classPicker(plugins) {
  const group = (type, label) => h("optgroup", { label },
    plugins.filter((p) => p.type === type)
      .sort((a, b) => shortName(a.class).localeCompare(shortName(b.class)))
      .map((p) => h("option", { value: p.class, title: p.class },
        p.summary ? `${shortName(p.class)} — ${p.summary}` : shortName(p.class))));
  return h("select", { id: "plugin", name: "plugin" },
    h("option", { value: "" }, "— choose a connector —"),
    group("source", "Sources (into topics)"), group("sink", "Sinks (out of topics)"));
}

async function newView() {
  const select = classPicker(await api("GET", "/v1/connector-plugins"));
  const form = h("form", { id: "create", novalidate: true });
  const fields = h("div", { id: "fields" });
  const nameInput = h("input", { id: "f-name", name: "name", required: true, autocomplete: "off",
    "aria-describedby": "e-name" });
  form.append(
    h("div", { class: "field" }, h("label", { for: "f-name" }, "Name"), nameInput,
      h("span", { class: "error", id: "e-name", role: "alert" })),
    h("div", { class: "field" }, h("label", { for: "plugin" }, "Connector class"), select),
    fields,
    h("div", { class: "actions" },
      h("button", { type: "button", id: "validate", onclick: () => submit(false) }, "Validate"),
      h("button", { type: "submit", id: "submit" }, "Create")));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); submit(true); });
  select.addEventListener("change", async () => {
    fields.replaceChildren();
    if (!select.value) return;
    const defs = (await api("GET", `/plugin/config?plugin=${enc(select.value)}`)).body
      .filter((d) => !FORM_KEYS.has(d.name));
    defs.sort((a, b) => (b.required - a.required) || a.name.localeCompare(b.name));
    for (const d of defs) {
      const id = `f-${d.name}`;
      const input = h("input", {
        id, name: d.name, "data-key": d.name, "aria-describedby": `e-${d.name}`,
        // a secret is typed unseen and never offered back by the browser
        type: d.type === "password" ? "password" : "text",
        autocomplete: d.type === "password" ? "new-password" : "off",
        placeholder: d.default_value === null ? "" : d.default_value,
      });
      fields.append(h("div", { class: d.required ? "field required" : "field" },
        h("label", { for: id }, d.name, d.required ? " *" : ""),
        input,
        h("span", { class: "error", id: `e-${d.name}`, role: "alert" }),
        d.documentation ? h("small", {}, d.documentation) : null));
    }
  });

  function collect() {
    const config = { "connector.class": select.value };
    for (const input of fields.querySelectorAll("input[data-key]")) {
      if (input.value.trim() !== "") config[input.dataset.key] = input.value;
    }
    return config;
  }

  // Each problem beside its field, the field marked invalid; the first one scrolled to and
  // focused, so that a problem below the fold is not only a count in a toast.
  function mark(key, text) {
    const slot = document.getElementById(`e-${key}`);
    const input = document.getElementById(`f-${key}`);
    if (!slot) return null;
    slot.textContent = text;
    if (input) input.setAttribute("aria-invalid", "true");
    return input || slot;
  }

  async function submit(create) {
    for (const e of form.querySelectorAll(".error")) e.textContent = "";
    for (const e of form.querySelectorAll("[aria-invalid]")) e.removeAttribute("aria-invalid");
    if (!select.value) { flash("Choose a connector class first.", "error"); select.focus(); return; }
    const config = collect();
    const result = await api("PUT", `/v1/connector-plugins/${enc(select.value)}/config/validate`, config);
    const marked = [];
    const elsewhere = [];
    if (!nameInput.value.trim()) marked.push(mark("name", "a name is required"));
    for (const c of result.configs) {
      if (!c.value.errors.length) continue;
      const text = c.value.errors.join("; ");
      const at = mark(c.value.name, text);
      if (at) marked.push(at);
      else elsewhere.push(`${c.value.name}: ${text}`);
    }
    const count = Math.max(result.error_count, marked.length + elsewhere.length);
    if (count) {
      const first = marked.find((x) => x);
      if (first) {
        first.scrollIntoView({ block: "center" });
        first.focus({ preventScroll: true });
      }
      flash(elsewhere.length ? elsewhere.join(" · ")
        : `${count} problem(s): see the marked fields`, "error");
      return;
    }
    if (!create) { flash("The config is valid.", "info"); return; }
    try {
      await api("POST", "/v1/connectors", { name: nameInput.value.trim(), config });
      flash(`Connector ${nameInput.value.trim()} created`, "info");
      location.hash = `#/connector/${enc(nameInput.value.trim())}`;
    } catch (e) { flash(e.message, "error"); }
  }
  return [h("h1", {}, "New connector"), form];
}

// -- topics -------------------------------------------------------------------------------------
// One row per topic (its record count over all queues); its queues on expand.
async function topicsView() {
  const topics = await api("GET", "/v1/topics");
  if (!topics.length) return [h("h1", {}, "Topics"), h("p", {}, "No topics.")];
  const records = (q) => q.max_offset - q.min_offset;
  const queues = (t) => h("details", { class: "queues" },
    h("summary", {}, `${t.queues.length} ${t.queues.length === 1 ? "queue" : "queues"}`),
    h("table", { class: "queue-offsets" },
      h("thead", {}, h("tr", {}, ["Queue", "Min offset", "Max offset", "Records"]
        .map((x) => h("th", {}, x)))),
      h("tbody", {}, t.queues.map((q) => h("tr", {},
        h("td", {}, q.queue_id), h("td", {}, q.min_offset), h("td", {}, q.max_offset),
        h("td", {}, records(q)))))));
  const row = (t) => h("tr", { "data-topic": t.name },
    h("td", {}, h("a", { href: `#/topic/${enc(t.name)}` }, t.name)),
    h("td", {}, queues(t)),
    h("td", { class: "records-count" },
      t.queues.reduce((sum, q) => sum + records(q), 0).toLocaleString("en")));
  return [h("h1", {}, "Topics"), h("table", { id: "topics" },
    h("thead", {}, h("tr", {}, ["Topic", "Queues", "Records"].map((x) => h("th", {}, x)))),
    h("tbody", {}, topics.map(row)))];
}

async function topicView(name) {
  return [h("h1", {}, `Topic ${name}`), h("p", {}, "The last 20 records:"),
    recordsTable(await api("GET", `/v1/topics/${enc(name)}/records?limit=20`), "records")];
}

// -- cluster ------------------------------------------------------------------------------------
async function clusterView() {
  const [info, all] = await Promise.all([
    api("GET", "/getClusterInfo"),
    api("GET", "/v1/connectors?expand=status"),
  ]);
  const workers = [...info.body].sort();
  const running = {}; // worker -> connector names whose connector or tasks run there
  const tasks = {}; // worker -> count of its tasks
  for (const [name, c] of Object.entries(all)) {
    const st = c.status;
    for (const w of new Set([st.connector.workerId, ...st.tasks.map((t) => t.workerId)])) {
      (running[w] = running[w] || []).push(name);
    }
    for (const t of st.tasks) tasks[t.workerId] = (tasks[t.workerId] || 0) + 1;
  }
  const elsewhere = Object.keys(running).filter((w) => !workers.includes(w)).sort();
  const row = (w, live) => h("tr", {},
    h("td", {}, w), h("td", {}, live ? "live" : "not live"),
    h("td", {}, (running[w] || []).length), h("td", {}, tasks[w] || 0),
    h("td", {}, (running[w] || []).sort().map((n, i) =>
      [i ? ", " : "", h("a", { href: `#/connector/${enc(n)}` }, n)])));
  return [
    h("h1", {}, "Cluster"),
    h("p", {}, workers.length > 1 ? `${workers.length} live workers (distributed mode)`
      : "One worker (standalone mode, or a distributed cluster of one)"),
    h("table", { id: "workers" },
      h("thead", {}, h("tr", {}, ["Worker", "Membership", "Connectors", "Tasks", "Runs"]
        .map((x) => h("th", {}, x)))),
      h("tbody", {}, workers.map((w) => row(w, true)), elsewhere.map((w) => row(w, false)))),
  ];
}

// -- routing ------------------------------------------------------------------------------------
// Each render is numbered: a slow page (a connector's, with its dead letters) that answers after
// the user moved on must not replace the page they moved to.
let renders = 0;

async function render(navigated) {
  const mine = ++renders;
  const hash = location.hash || "#/";
  const [, view, ...rest] = hash.slice(1).split("/");
  const arg = decodeURIComponent(rest.join("/"));
  try {
    let content;
    if (view === "connector") content = await connectorView(arg);
    else if (view === "new") content = await newView();
    else if (view === "topics") content = await topicsView();
    else if (view === "topic") content = await topicView(arg);
    else if (view === "cluster") content = await clusterView();
    else content = await connectorsView();
    if (mine !== renders) return;
    main.replaceChildren(...content.filter((x) => x));
    drawSparklines();
    // keyboard and screen-reader users start at the new page's content, not the old link; a
    // new page opens at its top, not where the last one was scrolled to
    if (navigated) {
      window.scrollTo(0, 0);
      main.focus({ preventScroll: true });
    }
  } catch (e) {
    if (mine !== renders) return;
    if (e instanceof LoginNeeded) {
      if (token()) sessionStorage.removeItem(TOKEN_KEY);
      showLogout();
      main.replaceChildren(...loginView(e.message));
    } else main.replaceChildren(h("p", { class: "error" }, e.message));
  }
}

window.addEventListener("hashchange", () => { flash("", ""); render(true); });
function loadWorkers() {
  api("GET", "/getClusterInfo").then((info) => {
    document.getElementById("worker").textContent = `workers: ${info.body.join(", ")}`;
  }).catch(() => {});
}

showLogout();
loadWorkers();
render();
sampleMetrics().catch(() => {});
setInterval(() => sampleMetrics().catch(() => {}), SAMPLE_MS);
