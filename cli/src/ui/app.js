// Drover dashboard. Every page reads the coordinator's API through `drover ui`'s proxy
// (/api/... = /v1/...); what the coordinator returns is put in the page as text, never as
// HTML. Lists are paged by the API's cursors: no page loads every host.
"use strict";

const TOKEN_KEY = "drover-ui-token";
(function takeToken() {
  const m = location.hash.match(/token=([0-9a-f]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, m[1]);
    history.replaceState(null, "", location.pathname + "#/");
  }
})();
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

let me = { name: "", role: "viewer", canAct: false };
let timer = null;
let stream = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick" || k === "onsubmit" || k === "onchange") e[k] = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function showError(text) {
  const box = document.getElementById("error");
  box.textContent = text || "";
  box.hidden = !text;
}

async function api(path, opts = {}) {
  const headers = { "X-Drover-Token": token() };
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch("/api/" + path, { method: opts.method || "GET", headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
  if (!resp.ok) {
    const msg = json && json.error ? json.error.message : text;
    throw new Error(`${resp.status}: ${msg}`);
  }
  return json;
}

function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "muted" }, empty || "Nothing to show.");
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

function stateCell(s) {
  return el("td", { class: "state-" + s }, s);
}

function bar(done, total, attrs) {
  const pct = total ? Math.round((100 * done) / total) : 0;
  const fill = el("div", { class: "fill" });
  fill.style.width = pct + "%";
  return el("div", Object.assign({ class: "bar", "data-done": done, "data-total": total }, attrs || {}), fill, el("span", { class: "txt" }, `${done}/${total} converged`));
}

// An action that asks for a reason before it is sent; rendered for admins only.
function action(label, path, after) {
  if (!me.canAct) return null;
  const wrap = el("span", { class: "action" });
  const open = el("button", { "data-action": label.toLowerCase() }, label);
  open.onclick = () => {
    const input = el("input", { name: "reason", placeholder: `Why ${label.toLowerCase()}? (audited)`, required: true });
    const form = el("form", { class: "act", "data-action-form": label.toLowerCase() }, input, el("button", { class: "primary", type: "submit" }, "Confirm"));
    form.onsubmit = async (ev) => {
      ev.preventDefault();
      const reason = input.value.trim();
      if (!reason) return;
      try {
        await api(path, { method: "POST", body: { reason } });
        showError("");
        if (after) after();
      } catch (e) {
        showError(`${label}: ${e.message}`);
      }
    };
    wrap.replaceChildren(form);
    input.focus();
  };
  wrap.append(open);
  return wrap;
}

// A list read page by page: `next` from each answer is the following page's `after`.
function pager(render, fetchPage) {
  const cursors = [null];
  let page = 0;
  const holder = el("div");
  async function load() {
    const ans = await fetchPage(cursors[page]);
    cursors[page + 1] = ans.next;
    const prev = el("button", { disabled: page === 0 }, "Previous");
    prev.onclick = () => { page -= 1; load().catch((e) => showError(e.message)); };
    const next = el("button", { disabled: ans.next === null || ans.next === undefined, "data-next": true }, "Next");
    next.onclick = () => { page += 1; load().catch((e) => showError(e.message)); };
    holder.replaceChildren(render(ans.items), el("div", { class: "pager" }, prev, el("span", { class: "muted" }, `page ${page + 1}`), next));
  }
  return { holder, load };
}

const PAGE = 50;
const q = (o) => Object.entries(o).filter(([, v]) => v !== null && v !== undefined && v !== "").map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&");

// ---- pages ----------------------------------------------------------------------------

async function fleetPage(main) {
  const s = await api("fleet/summary");
  const card = (key, label) => el("div", { class: "card" }, el("div", { class: "n", "data-count": key }, s[key]), el("div", { class: "l" }, label));
  const byState = Object.entries(s.byState).filter(([st]) => st !== "deleted").map(([st, n]) => el("tr", {}, stateCell(st), el("td", { "data-state-count": st }, n)));
  main.replaceChildren(
    el("h1", {}, "Fleet"),
    el("div", { class: "cards" },
      card("hosts", "hosts"), card("schedulable", "schedulable"), card("cordoned", "cordoned"),
      card("offline", "offline"), card("quarantined", "quarantined"), card("drifted", "drifted from MAAS")),
    el("h2", {}, "By lifecycle state"),
    table(["State", "Hosts"], byState),
    el("p", { class: "muted" }, `Counted by the coordinator at ${s.at}.`));
}

// The waves; the planner's report too (a plan on the coordinator) only when `waits`.
async function rolloutBars(id, waits) {
  const p = await api(`rollouts/${encodeURIComponent(id)}/progress?waits=${waits}`);
  return { p, bars: el("div", { class: "waves" }, p.waves.map((w) => el("div", { class: "wave" }, el("span", { class: "muted" }, `wave ${w.index} `), bar(w.converged, w.total, { "data-rollout": id, "data-wave": w.index })))) };
}

async function rolloutsPage(main) {
  const list = await api("rollouts");
  const live = new Set(["Opening", "Active", "Converging", "Halted", "Reverting"]);
  const rows = [];
  for (const r of list.items) {
    const waves = live.has(r.state) ? (await rolloutBars(r.rolloutId, false)).bars : el("span", { class: "muted" }, "—");
    const acts = [];
    if (["Active", "Converging", "Opening"].includes(r.state)) acts.push(action("Halt", `rollouts/${encodeURIComponent(r.rolloutId)}/halt`, route));
    if (r.state === "Halted") acts.push(action("Resume", `rollouts/${encodeURIComponent(r.rolloutId)}/resume`, route));
    rows.push(el("tr", { "data-rollout-row": r.rolloutId },
      el("td", {}, el("a", { href: `#/rollouts/${encodeURIComponent(r.rolloutId)}` }, r.rolloutId)),
      stateCell(r.state), el("td", {}, waves), el("td", {}, acts)));
  }
  main.replaceChildren(el("h1", {}, "Rollouts"), table(["Rollout", "State", "Waves", ""], rows, "No rollouts yet."));
}

async function rolloutPage(main, id) {
  const [{ p, bars }, status] = await Promise.all([rolloutBars(id, true), api(`rollouts/${encodeURIComponent(id)}/status`)]);
  const waits = p.waits.map((w) => el("li", { "data-wait-host": w.host || "", "data-wait-kind": w.why.kind },
    el("span", { class: "kind" }, w.why.kind), " ", w.host ? el("b", {}, w.host + ": ") : null, w.reason));
  const hosts = status.hosts.map((h) => el("tr", {}, el("td", {}, h.hostname), el("td", {}, h.waveIndex), stateCell(h.state), el("td", {}, h.since), el("td", { class: "muted" }, h.intentTarget || "")));
  const acts = [];
  if (["Active", "Converging", "Opening"].includes(p.rollout.state)) acts.push(action("Halt", `rollouts/${encodeURIComponent(id)}/halt`, route));
  if (p.rollout.state === "Halted") acts.push(action("Resume", `rollouts/${encodeURIComponent(id)}/resume`, route));
  main.replaceChildren(
    el("h1", {}, `Rollout ${id} `, el("span", { class: "state-" + p.rollout.state, "data-rollout-state": p.rollout.state }, p.rollout.state), acts),
    bars,
    el("h2", {}, "Why hosts wait"),
    p.reportError ? el("p", { class: "muted" }, p.reportError) : waits.length ? el("ul", { class: "waits" }, waits) : el("p", { class: "muted" }, "Nothing waits."),
    el("h2", {}, "Hosts dispatched"),
    table(["Host", "Wave", "State", "Since", "Target"], hosts, "No host dispatched yet."));
}

async function hostsPage(main) {
  const stateSel = el("select", { name: "state" }, ["", "active", "offline", "quarantined", "enrolling", "bootstrap_issued", "draining", "retired"].map((s) => el("option", { value: s }, s || "any state")));
  const render = (items) => table(["Host", "State", "Schedulable", "Last check-in"], items.map((h) => el("tr", {},
    el("td", {}, el("a", { href: `#/hosts/${h.id}` }, h.hostname)), stateCell(h.state), el("td", {}, h.schedulable ? "yes" : "cordoned"),
    el("td", { class: "muted" }, h.lastCheckin ? h.lastCheckin.at : "never"))), "No hosts.");
  let p = pager(render, (after) => api("hosts?" + q({ limit: PAGE, state: stateSel.value, after })));
  stateSel.onchange = () => { p = pager(render, (after) => api("hosts?" + q({ limit: PAGE, state: stateSel.value, after }))); main.lastChild.replaceWith(p.holder); p.load().catch((e) => showError(e.message)); };
  main.replaceChildren(el("h1", {}, "Hosts"), el("p", {}, "State ", stateSel), p.holder);
  await p.load();
}

async function hostPage(main, id) {
  const [h, events, jobs] = await Promise.all([api(`hosts/${id}`), api("events?" + q({ host: id, limit: 200 })), api("jobs?" + q({ host: id, limit: 100 }))]);
  const acts = h.schedulable ? action("Cordon", `hosts/${id}/cordon`, route) : action("Uncordon", `hosts/${id}/uncordon`, route);
  main.replaceChildren(
    el("h1", {}, `Host ${h.hostname} `, el("span", { class: "state-" + h.state }, h.state), " ", el("span", { class: "muted", "data-schedulable": String(h.schedulable) }, h.schedulable ? "schedulable" : "cordoned"), acts),
    el("p", { class: "muted" }, `id ${h.id}; last check-in ${h.lastCheckin ? h.lastCheckin.at + " (agent " + h.lastCheckin.agentVersion + ")" : "never"}`),
    el("h2", {}, "Jobs"),
    jobsTable(jobs.items),
    el("h2", {}, "History"),
    table(["#", "At", "Kind", "What"], events.items.slice().reverse().map((e) => el("tr", {}, el("td", {}, e.id), el("td", {}, e.at), el("td", {}, e.kind), el("td", {}, e.message))), "No events."));
}

function jobsTable(items) {
  return table(["Job", "Kind", "Host", "State", "Stage", "Updated", ""], items.map((j) => el("tr", { "data-job": j.jobId },
    el("td", { class: "muted" }, j.jobId.slice(0, 8)), el("td", {}, j.kind), el("td", {}, j.hostname || ""), stateCell(j.state),
    el("td", {}, j.stage || ""), el("td", { class: "muted" }, j.updatedAt),
    el("td", {}, j.state === "failed_retryable" ? action("Retry", `jobs/${j.jobId}/retry_stage`, route) : null))), "No jobs.");
}

async function jobsPage(main) {
  const p = pager(jobsTable, (after) => api("jobs?" + q({ limit: PAGE, after })));
  main.replaceChildren(el("h1", {}, "Jobs"), p.holder);
  await p.load();
}

async function maintenancePage(main) {
  const render = (items) => table(["Request", "Initiator", "State", "Jobs", "Created", "Reason"], items.map((m) => el("tr", {},
    el("td", { class: "muted" }, m.requestId.slice(0, 8)), el("td", {}, m.initiator), stateCell(m.state), el("td", {}, (m.jobs || []).length),
    el("td", { class: "muted" }, m.createdAt), el("td", {}, m.reason))), "No maintenance requests.");
  const p = pager(render, (after) => api("maintenance?" + q({ limit: PAGE, after })));
  main.replaceChildren(el("h1", {}, "Maintenance"), p.holder);
  await p.load();
}

async function onboardingsPage(main) {
  const list = await api("maas/onboardings?workflow=all");
  main.replaceChildren(el("h1", {}, "MAAS workflows"), table(["Host", "Site", "State", "Stage", "Attempt"], list.onboardings.map((o) => el("tr", {},
    el("td", {}, o.hostname), el("td", {}, o.site), stateCell(o.state), el("td", {}, `${o.stage} (${o.stageIndex + 1}/${o.stages.length})`), el("td", {}, o.attempt))), "No onboardings."));
}

async function racksPage(main) {
  const list = await api("racks");
  main.replaceChildren(el("h1", {}, "Racks"), table(["Rack", "Hardware", "State", "Maintenance"], list.racks.map((r) => el("tr", {},
    el("td", {}, r.name), el("td", {}, r.hardwareType), stateCell(r.state), el("td", {}, r.maintenance ? JSON.stringify(r.maintenance) : "—"))), "No racks."));
}

function eventsPage(main) {
  const body = el("tbody", { id: "events" });
  const status = el("span", { class: "muted", "data-stream": "connecting" }, "connecting…");
  main.replaceChildren(el("h1", {}, "Events ", status), el("p", { class: "muted" }, "Live from when this page opened; newest first."),
    el("table", {}, el("thead", {}, el("tr", {}, ["#", "At", "Kind", "What"].map((h) => el("th", {}, h)))), body));
  stream = new EventSource("/api/events/stream?token=" + encodeURIComponent(token()));
  stream.onopen = () => { status.textContent = "live"; status.setAttribute("data-stream", "live"); };
  stream.onerror = () => { status.textContent = "reconnecting…"; status.setAttribute("data-stream", "reconnecting"); };
  stream.onmessage = (m) => {
    const e = JSON.parse(m.data);
    body.prepend(el("tr", { "data-event-id": e.id, "data-kind": e.kind }, el("td", {}, e.id), el("td", {}, e.at), el("td", {}, e.kind), el("td", {}, e.message)));
    while (body.childElementCount > 500) body.lastChild.remove();
  };
}

// ---- routing --------------------------------------------------------------------------

const routes = [
  [/^#\/?$/, fleetPage, true],
  [/^#\/rollouts$/, rolloutsPage, true],
  [/^#\/rollouts\/(.+)$/, rolloutPage, true],
  [/^#\/hosts$/, hostsPage, false],
  [/^#\/hosts\/([0-9a-f-]+)$/, hostPage, true],
  [/^#\/jobs$/, jobsPage, false],
  [/^#\/maintenance$/, maintenancePage, false],
  [/^#\/onboardings$/, onboardingsPage, true],
  [/^#\/racks$/, racksPage, true],
  [/^#\/events$/, eventsPage, false],
];

async function route() {
  clearTimeout(timer);
  if (stream) { stream.close(); stream = null; }
  const hash = location.hash || "#/";
  const main = document.getElementById("main");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("href") === hash.split("/").slice(0, 2).join("/").replace(/^#$/, "#/"));
  for (const [re, page, refresh] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    try {
      await page(main, ...m.slice(1).map(decodeURIComponent));
      showError("");
    } catch (e) {
      showError(e.message);
    }
    document.body.setAttribute("data-page", hash);
    // Pages that show live state refresh themselves; paged lists wait for the operator.
    // An open action form (a reason being typed) holds the refresh back.
    if (refresh) timer = setTimeout(function again() { if (document.querySelector("form.act")) timer = setTimeout(again, 2000); else route(); }, 2000);
    return;
  }
  main.replaceChildren(el("p", {}, "No such page."));
}

async function start() {
  if (!token()) {
    showError("No dashboard token: open the URL that drover ui printed.");
    return;
  }
  try {
    me = await api("whoami");
    document.getElementById("who").textContent = `${me.name} (${me.role})`;
    document.body.setAttribute("data-role", me.role);
  } catch (e) {
    showError(e.message);
    return;
  }
  window.addEventListener("hashchange", route);
  route();
}

start();
