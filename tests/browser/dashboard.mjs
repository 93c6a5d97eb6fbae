// Drives the dashboard in headless Chromium over the Chrome DevTools Protocol, the way a
// person uses it, and checks what they would see. Run by tests/tests/operations/dashboard_browser.rs,
// which starts the coordinator, the agents and two `drover ui` proxies (admin, viewer), and
// passes everything in DROVER_UI_TEST (JSON):
//   { admin, viewer: the URLs drover ui printed (with their #token=),
//     rollout: the rollout id to watch and halt, host: a host id for the host page,
//     screenshots: a directory for a PNG of each page, ready: a file to create once the
//     rollouts page shows, so the test starts the rollout's clock }
// Needs node's WebSocket (node >= 22, or 20.10+ with --experimental-websocket). Exits 0 when
// every check held; otherwise prints what failed and exits 1.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const cfg = JSON.parse(process.env.DROVER_UI_TEST);
mkdirSync(cfg.screenshots, { recursive: true });
const log = (...a) => console.log("[dashboard]", ...a);
const fail = (msg) => { throw new Error(msg); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- Chromium and a minimal CDP client -------------------------------------------------

const profile = mkdtempSync(join(tmpdir(), "drover-chromium-"));
const chrome = spawn(process.env.CHROMIUM || "chromium", [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
  "--remote-debugging-port=0", `--user-data-dir=${profile}`, "about:blank",
], { stdio: ["ignore", "ignore", "pipe"], detached: true });
const wsUrl = await new Promise((resolve, reject) => {
  let text = "";
  const t = setTimeout(() => reject(new Error("Chromium did not start in 30 s:\n" + text)), 30000);
  chrome.stderr.on("data", (d) => {
    text += d;
    const m = text.match(/DevTools listening on (ws:\/\/\S+)/);
    if (m) { clearTimeout(t); resolve(m[1]); }
  });
  chrome.on("exit", (code) => reject(new Error(`Chromium exited (${code}):\n${text}`)));
});

const ws = new WebSocket(wsUrl);
await new Promise((r, j) => { ws.onopen = r; ws.onerror = () => j(new Error("CDP connection failed")); });
let nextId = 1;
const pending = new Map();
ws.onmessage = (m) => {
  const msg = JSON.parse(m.data);
  if (msg.id && pending.has(msg.id)) {
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    msg.error ? reject(new Error(`${msg.error.message}`)) : resolve(msg.result);
  }
};
const cdp = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
  const id = nextId++;
  pending.set(id, { resolve, reject });
  ws.send(JSON.stringify({ id, method, params, sessionId }));
});

async function newTab() {
  const { targetId } = await cdp("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await cdp("Target.attachToTarget", { targetId, flatten: true });
  const tab = {
    send: (m, p) => cdp(m, p, sessionId),
    async eval(expr) {
      const r = await tab.send("Runtime.evaluate", { expression: expr, returnByValue: true, awaitPromise: true });
      if (r.exceptionDetails) fail(`page script failed: ${expr}: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
      return r.result.value;
    },
    async waitFor(what, expr, ms = 10000) {
      const end = Date.now() + ms;
      for (;;) {
        // A page still loading has no body yet: that is "not yet", not a failure.
        const v = await tab.eval(`(() => { try { return ${expr}; } catch (_) { return false; } })()`);
        if (v) return v;
        if (Date.now() > end) fail(`${what}: not after ${ms} ms (page error: ${await tab.eval("document.getElementById('error')?.textContent || ''")})`);
        await sleep(50);
      }
    },
    async go(url) {
      await tab.send("Page.navigate", { url });
    },
    async shot(name) {
      const { data } = await tab.send("Page.captureScreenshot", { format: "png" });
      writeFileSync(join(cfg.screenshots, name + ".png"), Buffer.from(data, "base64"));
    },
  };
  await tab.send("Page.enable");
  await tab.send("Runtime.enable");
  await tab.send("Emulation.setDeviceMetricsOverride", { width: 1280, height: 900, deviceScaleFactor: 1, mobile: false });
  return tab;
}

// The proxy's API as the page reads it, for the comparisons.
const base = (url) => url.split("#")[0].replace(/\/$/, "");
const tokenOf = (url) => url.match(/token=([0-9a-f]+)/)[1];
async function api(url, path, opts = {}) {
  const resp = await fetch(`${base(url)}/api/${path}`, {
    method: opts.method || "GET",
    headers: Object.assign({ "X-Drover-Token": tokenOf(url) }, opts.body ? { "Content-Type": "application/json" } : {}),
    body: opts.body ? JSON.stringify(opts.body) : undefined,
  });
  if (!resp.ok) fail(`${path}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

const shown = (sel) => `!!document.querySelector(${JSON.stringify(sel)})`;
const results = [];
async function check(name, f) {
  const t0 = Date.now();
  await f();
  results.push(`ok: ${name} (${Date.now() - t0} ms)`);
  log("ok:", name);
}

let exit = 0;
try {
  const admin = await newTab();
  await admin.go(cfg.admin);
  await admin.waitFor("the admin is recognised", "document.body.getAttribute('data-role') === 'admin'");

  await check("the fleet overview's counts match the API", async () => {
    await admin.waitFor("the overview", shown("[data-count=hosts]"));
    const listed = (await api(cfg.admin, "hosts?limit=1000")).items;
    const want = { hosts: listed.length, cordoned: listed.filter((h) => !h.schedulable).length };
    for (const h of listed) want["state:" + h.state] = (want["state:" + h.state] || 0) + 1;
    const seen = await admin.eval(`(() => { const o = {}; for (const e of document.querySelectorAll("[data-count]")) o[e.dataset.count] = +e.textContent;
      for (const e of document.querySelectorAll("[data-state-count]")) if (+e.textContent) o["state:" + e.dataset.stateCount] = +e.textContent; return o; })()`);
    for (const [k, v] of Object.entries(want)) if (seen[k] !== v) fail(`overview ${k}: page ${seen[k]}, API ${v} (${JSON.stringify(seen)})`);
    await admin.shot("fleet");
  });

  await check("a rollout's bars advance while it runs", async () => {
    await admin.go(base(cfg.admin) + "/#/rollouts");
    const bar = `[data-rollout=${JSON.stringify(cfg.rollout)}]`;
    await admin.waitFor("the rollout's bars", shown(bar), 20000);
    writeFileSync(cfg.ready, "rollouts page shown\n");
    const done = `[...document.querySelectorAll(${JSON.stringify(bar)})].reduce((n, b) => n + +b.dataset.done, 0)`;
    const first = await admin.eval(done);
    await admin.waitFor(`converged hosts beyond ${first}`, `${done} > ${first}`, 30000);
    await admin.shot("rollouts");
  });

  await check("an admin halts the rollout from the page", async () => {
    const row = `[data-rollout-row=${JSON.stringify(cfg.rollout)}]`;
    await admin.waitFor("the halt button", shown(`${row} button[data-action=halt]`));
    await admin.eval(`document.querySelector(${JSON.stringify(row + " button[data-action=halt]")}).click()`);
    await admin.waitFor("the reason form", shown(`${row} form[data-action-form=halt] input`));
    await admin.eval(`document.querySelector(${JSON.stringify(row + " form input")}).focus()`);
    await admin.send("Input.insertText", { text: "halted from the dashboard by the browser test" });
    await admin.shot("halt-reason");
    await admin.eval(`document.querySelector(${JSON.stringify(row + " form")}).requestSubmit()`);
    await admin.waitFor("the rollout shown Halted", `document.querySelector(${JSON.stringify(row + " td.state-Halted")}) !== null`);
    await admin.go(base(cfg.admin) + "/#/rollouts/" + encodeURIComponent(cfg.rollout));
    await admin.waitFor("the rollout page", shown("[data-rollout-state=Halted]"));
    // The planner's typed report: a halted rollout waits for its operator.
    await admin.waitFor("the report of why hosts wait", shown("ul.waits li[data-wait-kind=halted]"));
    await admin.shot("rollout");
  });

  await check("an event appears live within a second", async () => {
    await admin.go(base(cfg.admin) + "/#/events");
    await admin.waitFor("the stream is live", shown("[data-stream=live]"));
    const before = Date.now();
    await api(cfg.admin, `hosts/${cfg.host}/cordon`, { method: "POST", body: { reason: "live event check" } });
    await admin.waitFor("the cordon's event", shown("tr[data-kind='host.schedulable']"), 5000);
    const took = Date.now() - before;
    if (took > 1000) fail(`the event took ${took} ms to appear`);
    results.push(`event shown ${took} ms after the cordon answered`);
    await admin.shot("events");
  });

  await check("the host, jobs, maintenance, onboardings and racks pages render", async () => {
    for (const [page, ready, name] of [
      ["#/hosts", "table a[href^='#/hosts/']", "hosts"],
      [`#/hosts/${cfg.host}`, "[data-schedulable]", "host"],
      ["#/jobs", ".pager", "jobs"],
      ["#/maintenance", ".pager", "maintenance"],
      ["#/onboardings", "h1", "onboardings"],
      ["#/racks", "h1", "racks"],
    ]) {
      await admin.go(base(cfg.admin) + "/" + page);
      await admin.waitFor(page, `document.body.getAttribute('data-page') === ${JSON.stringify(page)} && ${shown(ready)}`);
      await admin.shot(name);
    }
  });

  await check("a viewer sees no action buttons", async () => {
    const viewer = await newTab();
    await viewer.go(cfg.viewer);
    await viewer.waitFor("the viewer is recognised", "document.body.getAttribute('data-role') === 'viewer'");
    for (const page of ["#/rollouts", `#/rollouts/${encodeURIComponent(cfg.rollout)}`, `#/hosts/${cfg.host}`, "#/jobs"]) {
      await viewer.go(base(cfg.viewer) + "/" + page);
      await viewer.waitFor(page, `document.body.getAttribute('data-page') === ${JSON.stringify(page)}`);
      const buttons = await viewer.eval("document.querySelectorAll('button[data-action]').length");
      if (buttons !== 0) fail(`${page}: a viewer is shown ${buttons} action button(s)`);
    }
    await viewer.go(base(cfg.viewer) + "/#/rollouts");
    await viewer.waitFor("rollouts as a viewer", shown("[data-rollout-row]"));
    await viewer.shot("viewer-rollouts");
  });
} catch (e) {
  console.error("[dashboard] FAILED:", e.message);
  exit = 1;
} finally {
  for (const r of results) console.log("[dashboard]", r);
}
// Cleanup never decides the outcome: Chromium's whole process group (its renderers too) is
// killed, then its profile removed.
try {
  ws.onclose = null;
  ws.onerror = null;
  ws.close();
} catch (_) { /* gone */ }
const gone = new Promise((r) => (chrome.exitCode !== null || chrome.signalCode !== null ? r() : chrome.once("exit", r)));
try { process.kill(-chrome.pid, "SIGKILL"); } catch (_) { chrome.kill("SIGKILL"); }
await gone;
try { rmSync(profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 }); } catch (e) { console.error("[dashboard] profile left:", e.message); }
console.log(`[dashboard] exit ${exit}`);
process.exit(exit);
