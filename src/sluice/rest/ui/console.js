// The sluice web console: plain JavaScript over the worker's REST API (/v1 and /plugin/config).
// Views are chosen by the URL's hash: #/ (connectors), #/connector/NAME, #/new, #/topics,
// #/topic/NAME. Every value from the server is inserted as text, never as HTML.
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

async function api(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
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

// -- connectors ---------------------------------------------------------------------------------
async function connectorsView() {
  const all = await api("GET", "/v1/connectors?expand=status");
  const names = Object.keys(all).sort();
  const rows = names.map((name) => {
    const st = all[name].status;
    const failure = firstLine(st.connector.trace) ||
      firstLine((st.tasks.find((t) => t.trace) || {}).trace);
    return h("tr", {},
      h("td", {}, h("a", { href: `#/connector/${enc(name)}` }, name)),
      h("td", {}, st.type),
      h("td", {}, stateBadge(st.connector.state)),
      h("td", {}, st.tasks.map((t) => `task ${t.id}: ${t.state}`).join(", ")),
      h("td", { class: "failure" }, failure));
  });
  return [
    h("h1", {}, "Connectors"),
    names.length ? h("table", { id: "connectors" },
      h("thead", {}, h("tr", {}, ["Name", "Type", "State", "Tasks", "Failure"].map((x) => h("th", {}, x)))),
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
      h("tr", {}, h("td", {}, `task ${t.id}`), h("td", {}, stateBadge(t.state)),
        h("td", { class: "failure" }, firstLine(t.trace)))))),
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
async function newView() {
  const plugins = (await api("GET", "/v1/connector-plugins")).sort((a, b) => a.class.localeCompare(b.class));
  const select = h("select", { id: "plugin", name: "plugin" },
    h("option", { value: "" }, "— choose a connector class —"),
    plugins.map((p) => h("option", { value: p.class }, `${p.class} (${p.type})`)));
  const form = h("form", { id: "create", novalidate: true });
  const fields = h("div", { id: "fields" });
  const nameInput = h("input", { id: "f-name", name: "name", required: true, autocomplete: "off" });
  form.append(
    h("div", { class: "field" }, h("label", { for: "f-name" }, "Name"), nameInput,
      h("span", { class: "error", id: "e-name" })),
    h("div", { class: "field" }, h("label", { for: "plugin" }, "Connector class"), select),
    fields,
    h("div", { class: "actions" },
      h("button", { type: "button", id: "validate", onclick: () => submit(false) }, "Validate"),
      h("button", { type: "submit", id: "submit" }, "Create")));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); submit(true); });
  select.addEventListener("change", async () => {
    fields.replaceChildren();
    if (!select.value) return;
    const defs = (await api("GET", `/plugin/config?plugin=${enc(select.value)}`)).body;
    defs.sort((a, b) => (b.required - a.required) || a.name.localeCompare(b.name));
    for (const d of defs) {
      const id = `f-${d.name}`;
      const input = h("input", {
        id, name: d.name, "data-key": d.name,
        type: d.type === "password" ? "password" : "text",
        placeholder: d.default_value === null ? "" : d.default_value,
        autocomplete: "off",
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

  async function submit(create) {
    for (const e of form.querySelectorAll(".error")) e.textContent = "";
    if (!select.value) { flash("Choose a connector class first.", "error"); return; }
    const config = collect();
    const result = await api("PUT", `/v1/connector-plugins/${enc(select.value)}/config/validate`, config);
    let shown = 0;
    for (const c of result.configs) {
      if (!c.value.errors.length) continue;
      const slot = document.getElementById(`e-${c.value.name}`);
      if (slot) { slot.textContent = c.value.errors.join("; "); shown += 1; }
      else flash(c.value.errors.join("; "), "error");
    }
    if (!nameInput.value.trim()) {
      document.getElementById("e-name").textContent = "a name is required";
      shown += 1;
    }
    if (result.error_count || shown) {
      flash(`${result.error_count || shown} problem(s): see the messages beside the fields`, "error");
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
async function topicsView() {
  const topics = await api("GET", "/v1/topics");
  return [h("h1", {}, "Topics"), topics.length ? h("table", { id: "topics" },
    h("thead", {}, h("tr", {}, ["Topic", "Queue", "Min offset", "Max offset", "Records"].map((x) => h("th", {}, x)))),
    h("tbody", {}, topics.flatMap((t) => t.queues.map((q, i) => h("tr", {},
      h("td", {}, i === 0 ? h("a", { href: `#/topic/${enc(t.name)}` }, t.name) : ""),
      h("td", {}, q.queue_id), h("td", {}, q.min_offset), h("td", {}, q.max_offset),
      h("td", {}, q.max_offset - q.min_offset))))))
    : h("p", {}, "No topics.")];
}

async function topicView(name) {
  return [h("h1", {}, `Topic ${name}`), h("p", {}, "The last 20 records:"),
    recordsTable(await api("GET", `/v1/topics/${enc(name)}/records?limit=20`), "records")];
}

// -- routing ------------------------------------------------------------------------------------
async function render() {
  const hash = location.hash || "#/";
  const [, view, ...rest] = hash.slice(1).split("/");
  const arg = decodeURIComponent(rest.join("/"));
  try {
    let content;
    if (view === "connector") content = await connectorView(arg);
    else if (view === "new") content = await newView();
    else if (view === "topics") content = await topicsView();
    else if (view === "topic") content = await topicView(arg);
    else content = await connectorsView();
    main.replaceChildren(...content.filter((x) => x));
  } catch (e) {
    main.replaceChildren(h("p", { class: "error" }, e.message));
  }
}

window.addEventListener("hashchange", () => { flash("", ""); render(); });
api("GET", "/getClusterInfo").then((info) => {
  document.getElementById("worker").textContent = `workers: ${info.body.join(", ")}`;
}).catch(() => {});
render();
