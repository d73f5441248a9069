// idlegrid's dashboard: plain JavaScript, no build step. It reads the
// node's local API (same origin, the sign-in cookie) and takes the node's
// pushed updates from GET /v1/events (server-sent events).
"use strict";

const $ = (sel) => document.querySelector(sel);

// inert escapes what a peer could put in its text to reorder or hide what
// is shown (control characters, bidirectional overrides and isolates,
// zero-width and other format characters, line separators) as \u escapes,
// as the CLI does (market/inert); the API's JSON keeps the text exact.
const inert = (s) => String(s).replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}]/gu, (c) => "\\u" + c.codePointAt(0).toString(16).padStart(4, "0"));

// el builds an element: attributes (on* as listeners) and children (text
// is always a text node, so nothing from the network becomes markup, and
// inert, so none of it reorders the page).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k == null) continue;
    e.append(k instanceof Node ? k : document.createTextNode(inert(k)));
  }
  return e;
}

function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: cols || 8, class: "muted" }, empty))]));
}

const td = (v, cls) => el("td", { class: cls }, v);
const num = (v) => td(v, "num");
const short = (id) => (id ? "…" + id.slice(-8) : "");
const ms = (v) => (v > 0 ? v.toFixed(1) + " ms" : "–");
const when = (t) => (t && !t.startsWith("0001") ? new Date(t).toLocaleString() : "–");

function showError(msg) {
  const e = $("#error");
  e.textContent = msg;
  e.hidden = !msg;
}

// api calls the node's API; a change (POST) is JSON, and the browser adds
// this origin's Origin header, which the API asks of a cookie's changes.
async function api(path, body) {
  const opts = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.method = "POST";
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const v = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
  if (!r.ok) throw new Error(v.error || r.statusText);
  return v;
}

// The last of each pushed state.
const state = { status: null, leases: [], rentals: [], gpus: null, page: "market", selected: null };

// ---------- charts (uPlot) ----------

const charts = {};

function chartWidth(id) {
  return Math.max(320, $(id).clientWidth || 480);
}

// chart draws (or redraws with new data) the uPlot chart in div id.
function chart(id, opts, data) {
  const c = charts[id];
  if (c && c.series.length === opts.series.length) {
    c.setData(data);
    return c;
  }
  if (c) c.destroy();
  charts[id] = new uPlot(Object.assign({ width: chartWidth(id), height: 240 }, opts), data, $(id));
  return charts[id];
}

window.addEventListener("resize", () => {
  for (const [id, c] of Object.entries(charts)) c.setSize({ width: chartWidth(id), height: 240 });
});

const palette = ["#1f6f4a", "#2f6fb0", "#b06f2f", "#8a3fb0", "#b0302f", "#2fa3b0", "#6f8a1f", "#555"];

// ---------- Market ----------

let marketAt = 0, marketTimer = null;

function marketQuery() {
  const f = new FormData($("#offer-filters"));
  const q = new URLSearchParams();
  for (const [k, v] of f) if (v) q.set(k, v);
  q.set("limit", "20");
  return q;
}

// loadMarket marks its steps (market:data, market:tables, market:chart)
// on the performance timeline, for the first-paint test and a curious
// operator's devtools.
async function loadMarket() {
  marketAt = Date.now();
  const m = await api("/v1/market?" + marketQuery());
  performance.mark("market:data");
  $("#market-line").textContent = `${m.offers} offers in the book match; ${m.priced} priced in ${m.currency || "–"}, per GPU-hour`;
  fill($("#models tbody"), m.models.map((x) => el("tr", { "data-model": x.model },
    td(x.model), num(x.offers), num(x.gpus), num(x.providers), num(x.min), num(x.median), num(x.p90))), "no offers match");
  fill($("#cheapest tbody"), m.cheapest.map((o) => el("tr", { "data-provider": o.provider, "data-offer": o.id },
    td(short(o.provider)), td(o.gpus.map((g) => g.count + " × " + g.model).join(", ")), td(o.country),
    num(o.price + " " + o.currency), td(o.tiers.join(" ")), num(ms(o.rtt_ms)), num(o.reliability.toFixed(2)))), "no offers match");
  performance.mark("market:tables");
  const h = m.histogram;
  const xs = h.counts.map((_, i) => +(h.from + (i + 0.5) * h.width).toFixed(4));
  chart("#price-chart", {
    scales: { x: { time: false } },
    axes: [{ label: m.currency + " per GPU-hour" }, { label: "offers" }],
    legend: { show: false },
    series: [{}, { label: "offers", fill: "#1f6f4a88", stroke: "#1f6f4a", paths: uPlot.paths.bars({ size: [0.9, 40] }), points: { show: false } }],
  }, [xs, h.counts]);
  performance.mark("market:chart");
}

// marketPainted is when the browser first painted the market's summary
// line, which it draws in the frame that shows the tables and the chart
// (Element Timing: the paint itself, not a timer after it).
window.marketPainted = 0;
if (window.PerformanceObserver && PerformanceObserver.supportedEntryTypes.includes("element")) {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if (e.identifier === "market" && !window.marketPainted) window.marketPainted = e.renderTime || e.loadTime;
  }).observe({ type: "element", buffered: true });
}

// refreshMarket reloads the summary when the book changed, at most every
// two seconds.
function refreshMarket() {
  if (state.page !== "market" || marketTimer) return;
  marketTimer = setTimeout(() => { marketTimer = null; loadMarket().catch((e) => showError(e.message)); }, Math.max(0, 2000 - (Date.now() - marketAt)));
}

function bidFromForm() {
  const f = new FormData($("#quote-form"));
  const list = (s) => s.split(",").map((x) => x.trim()).filter(Boolean);
  const bid = { count: +f.get("count") || 1, hours: +f.get("hours") || 1, tier: f.get("tier"), max_price: f.get("max_price") };
  if (f.get("gpus")) bid.gpus = list(f.get("gpus"));
  if (+f.get("min_vram_gib")) bid.min_vram_gib = +f.get("min_vram_gib");
  if (f.get("regions")) bid.regions = list(f.get("regions").toUpperCase());
  if (f.get("where")) bid.where = f.get("where");
  if (f.get("sort")) bid.sort = f.get("sort");
  return bid;
}

async function quote(ev) {
  ev.preventDefault();
  const out = $("#quote-result");
  out.replaceChildren(el("p", { class: "muted" }, "asking the book…"));
  try {
    const r = await api("/v1/match", bidFromForm());
    out.replaceChildren(quoteView(r));
    $("#rent-form").hidden = !r.candidates.length;
  } catch (e) {
    out.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

function quoteView(r) {
  const line = el("p", { class: "muted", id: "quote-line" }, r.explained ? `${r.feasible} of ${r.considered} offers fit` : `the best ${r.candidates.length}, of ${r.considered} offers checked`);
  if (!r.candidates.length) {
    return el("div", { id: "quote-none" }, line,
      el("p", {}, r.explanation || "nothing fits"),
      el("ul", { class: "explain" }, (r.reasons || []).map((x) =>
        el("li", { "data-check": x.check }, el("b", {}, x.offers + " offers: "), x.kind, el("span", { class: "muted" }, " (e.g. " + x.example + ")")))),
      (r.nearest || []).length ? el("p", {}, "The book has instead: " + r.nearest.map((n) => `${n.model} (${n.offers} offers${n.from ? ", from " + n.from + " for " + n.gpus + " GPUs" : ""})`).join(", ")) : null);
  }
  return el("div", {}, line, el("table", { id: "candidates" },
    el("thead", {}, el("tr", {}, ["#", "Provider", "GPUs", "Price", "Effective", "Total", "Start", "RTT"].map((h) => el("th", {}, h)))),
    el("tbody", {}, r.candidates.map((c) => el("tr", { "data-provider": c.offer.provider, "data-offer": c.offer.id, "data-price": c.price },
      num(c.rank), td(short(c.offer.provider)), num(c.gpus + " × " + c.offer.gpus[0].model), num(c.price), num(c.effective_price), num(c.total),
      td(when(c.start)), num(ms(c.offer.rtt_ms)))))));
}

async function rent(ev) {
  ev.preventDefault();
  const f = new FormData($("#rent-form"));
  const req = Object.assign(bidFromForm(), { image: f.get("image") });
  const cmd = (f.get("command") || "").trim();
  if (cmd) req.command = ["sh", "-c", cmd];
  try {
    const v = await api("/v1/rentals", req);
    state.follow = v.id;
    location.hash = "#/leases";
  } catch (e) {
    showError("rent: " + e.message);
  }
}

// ---------- Swarm ----------

// project places vectors on the plane of their two principal axes.
function project(vecs) {
  const n = vecs.length, d = vecs[0].length;
  const mean = Array(d).fill(0);
  for (const v of vecs) v.forEach((x, i) => (mean[i] += x / n));
  const c = vecs.map((v) => v.map((x, i) => x - mean[i]));
  const axes = [];
  for (let k = 0; k < 2; k++) {
    let a = Array.from({ length: d }, (_, i) => (i === k ? 1 : 0.1));
    for (let it = 0; it < 50; it++) {
      const next = Array(d).fill(0);
      for (const v of c) {
        const p = v.reduce((s, x, i) => s + x * a[i], 0);
        v.forEach((x, i) => (next[i] += p * x));
      }
      for (const b of axes) { const p = next.reduce((s, x, i) => s + x * b[i], 0); b.forEach((x, i) => (next[i] -= p * x)); }
      const norm = Math.hypot(...next) || 1;
      a = next.map((x) => x / norm);
    }
    axes.push(a);
  }
  return c.map((v) => axes.map((a) => v.reduce((s, x, i) => s + x * a[i], 0)));
}

// precise labels an axis's ticks with three significant digits.
const precise = (u, vals) => vals.map((v) => +v.toPrecision(3));

async function loadSwarm() {
  const peers = await api("/v1/peers");
  const st = state.status;
  const reach = st ? `${st.reachability.state}, ${st.reachability.how}` : "";
  $("#swarm-line").textContent = st ? `${peers.length} peers connected; this node is ${reach}; its coordinate error ${st.coordinate.error.toFixed(2)} from ${st.coordinate.samples} samples (${st.coordinate.peers} peers' coordinates held)` : "";
  fill($("#peers tbody"), peers.map((p) => el("tr", { "data-peer": p.id },
    td(short(p.id)), num(ms(p.rtt_ms)), num(ms(p.estimated_rtt_ms)), td(p.relayed ? "relayed" : "direct"),
    td(p.near ? "near" : ""), num(p.reliability.toFixed(2)), td(p.basis), td(p.agent))), "no peers");
  const placed = peers.filter((p) => p.coordinate_vector && p.coordinate_vector.length);
  if (st && st.coordinate.vector && st.coordinate.vector.length && placed.length) {
    const pts = project([st.coordinate.vector, ...placed.map((p) => p.coordinate_vector)]);
    const rows = pts.map((xy, i) => ({ x: xy[0], y: xy[1], kind: i === 0 ? 2 : placed[i - 1].near ? 1 : 0 }));
    rows.sort((a, b) => a.x - b.x);
    const ys = (k) => rows.map((r) => (r.kind === k ? r.y : null));
    const pt = (color, size) => ({ stroke: color, fill: color, paths: () => null, points: { show: true, size: size, fill: color } });
    chart("#coord-chart", {
      scales: { x: { time: false } },
      axes: [{ label: "ms", values: precise }, { label: "ms", values: precise }],
      series: [{ label: "x" }, Object.assign({ label: "peer" }, pt("#2f6fb0", 7)), Object.assign({ label: "near" }, pt("#1f6f4a", 9)), Object.assign({ label: "this node" }, pt("#b0302f", 11))],
    }, [rows.map((r) => r.x), ys(0), ys(1), ys(2)]);
  }
}

function renderTopics() {
  const st = state.status;
  if (!st) return;
  fill($("#topics tbody"), Object.entries(st.topics || {}).sort().map(([t, v]) => el("tr", {}, td(t), num(v.peers), num(v.mesh))), "no topics", 3);
}

// ---------- My leases ----------

function costSoFar(l) {
  if (!l.price || !l.start || l.start.startsWith("0001")) return "–";
  const end = l.ended ? new Date(l.end) : new Date(Math.min(Date.now(), new Date(l.end)));
  const hours = Math.max(0, (end - new Date(l.start)) / 3600e3);
  const cost = parseFloat(l.price) * l.gpus * hours;
  return cost.toFixed(cost < 1 ? 4 : 2) + " " + l.currency;
}

function renderLeases() {
  const leases = [...state.leases].sort((a, b) => (b.start || "").localeCompare(a.start || ""));
  fill($("#rentals tbody"), state.rentals.map((r) => el("tr", { "data-rental": r.id },
    td(r.id), td(r.state), td(r.lease ? short(r.lease) : "–"), td(r.error || r.status || r.progress[r.progress.length - 1] || ""))), "none: rent from the market page's quote", 4);
  fill($("#leases tbody"), leases.map((l) => el("tr", { "data-lease": l.id, class: l.id === state.selected ? "selected" : "" },
    td(el("a", { href: "#/leases/" + l.id }, short(l.id))), td(l.role), td(l.state), td(short(l.role === "renter" ? l.provider : l.renter)),
    num(l.gpus), num(l.price + " " + l.currency), num(costSoFar(l)), num(l.beats), td(when(l.end)),
    td(l.ended ? "" : el("button", { class: "secondary cancel", "data-lease": l.id, onclick: () => cancelLease(l.id) }, armed(l.id) ? "Stop the job?" : "Cancel")))), "no leases", 10);
  // Follow the newest lease of a rental started here, or the one picked.
  if (!state.selected && state.follow) {
    const r = state.rentals.find((x) => x.id === state.follow);
    if (r && r.lease) selectLease(r.lease);
  }
  const sel = state.leases.find((l) => l.id === state.selected);
  if (sel) $("#output-state").textContent = sel.state + (sel.ended ? "" : " · " + costSoFar(sel) + " so far · " + sel.beats + " beats verified");
}

// cancelLease asks once more, on the button itself, then cancels: the
// job stops and the receipt bills what ran.
const armedUntil = {};
const armed = (id) => armedUntil[id] > Date.now();

async function cancelLease(id) {
  if (!armed(id)) {
    armedUntil[id] = Date.now() + 5000;
    renderLeases();
    setTimeout(renderLeases, 5000);
    return;
  }
  delete armedUntil[id];
  try {
    await api("/v1/leases/" + encodeURIComponent(id) + "/cancel", {});
  } catch (e) {
    showError("cancel: " + e.message);
  }
}

let output = null;

// selectLease streams lease id's output into the page: from its start,
// then live, until the lease ends.
function selectLease(id) {
  if (state.selected === id && output) return;
  if (output) output.close();
  state.selected = id;
  $("#lease-detail").hidden = false;
  $("#output-lease").textContent = id;
  const pre = $("#output");
  pre.replaceChildren();
  const l = state.leases.find((x) => x.id === id);
  if (l && l.role !== "renter") {
    pre.textContent = "(this node sells this lease: its output goes to the renter)";
    return;
  }
  output = new EventSource("/v1/leases/" + encodeURIComponent(id) + "/output");
  output.addEventListener("output", (ev) => {
    const o = JSON.parse(ev.data);
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    // The job's own output, lines and all, as the CLI shows it.
    const text = document.createTextNode(o.text);
    pre.append(o.stream === "stderr" ? el("span", { class: "stderr" }, text) : text);
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  });
  output.addEventListener("end", (ev) => {
    const l = JSON.parse(ev.data);
    output.close();
    output = null;
    pre.append(el("span", { class: "muted", id: "output-end" }, document.createTextNode("\n— lease " + l.state + " —\n")));
  });
  output.onerror = () => {
    // The stream broke (the node restarted, say): start over, once the
    // browser's retry would, rather than append the output twice.
    if (!output) return;
    output.close();
    output = null;
    setTimeout(() => { if (state.selected === id) { state.selected = null; selectLease(id); } }, 1000);
  };
  renderLeases();
}

async function loadLedger() {
  const [receipts, ledger] = await Promise.all([api("/v1/receipts"), api("/v1/ledger")]);
  fill($("#receipts tbody"), receipts.map((r) => el("tr", { "data-lease": r.lease_id },
    td(short(r.lease_id)), td(r.outcome), num(r.metered_seconds + " s"), num(r.amount + " " + r.currency), num(r.exit_code), td(r.signed_by.map(short).join(", ")))), "no receipts", 6);
  fill($("#ledger tbody"), ledger.map((e) => el("tr", {}, td(short(e.peer)), num(e.balance + " " + e.currency), num(e.receipts))), "empty", 3);
}

// ---------- My GPUs ----------

const series = { t: [], util: {}, power: {} };
const keepSamples = 150; // five minutes at a reading every two seconds

function renderGPUs() {
  const g = state.gpus;
  if (!g) {
    $("#gpus-line").textContent = state.status && !state.status.provider ? "This node sells no GPUs: set provider.enabled in its config." : "reading…";
    return;
  }
  $("#gpus-line").textContent = g.unavailable ? g.unavailable : `${g.gpus.length} GPUs read from ${g.source}${g.driver ? ", driver " + g.driver : ""}`;
  fill($("#gpus tbody"), g.gpus.map((x) => el("tr", { "data-uuid": x.uuid },
    num(x.index), td(x.model), num(x.utilization_pct + " %"), num(`${x.memory_used_mib} / ${x.memory_mib} MiB`), num(x.temperature_c + " °C"),
    num(`${x.power_draw_watts.toFixed(0)} / ${x.power_limit_watts.toFixed(0)} W`), td(x.lease ? short(x.lease) : "free"))), "no GPUs", 7);
  series.t.push(Date.now() / 1000);
  for (const x of g.gpus) {
    (series.util[x.index] ||= []).push(x.utilization_pct);
    (series.power[x.index] ||= []).push(x.power_draw_watts);
  }
  if (series.t.length > keepSamples) {
    series.t.shift();
    for (const m of [series.util, series.power]) for (const k in m) m[k].shift();
  }
  const lines = (m) => Object.keys(m).map((k, i) => ({ label: "GPU " + k, stroke: palette[i % palette.length], width: 1.5 }));
  const data = (m) => [series.t, ...Object.keys(m).map((k) => m[k])];
  chart("#util-chart", { scales: { y: { range: [0, 100] } }, series: [{}, ...lines(series.util)] }, data(series.util));
  chart("#power-chart", { series: [{}, ...lines(series.power)] }, data(series.power));
  const o = g.offer;
  $("#own-offer").replaceChildren(o ? el("p", { id: "own-offer-line" },
    `${o.gpus.map((x) => x.count + " × " + x.model).join(", ")} in ${o.country || "–"} at ${o.price} ${o.currency}/GPU-hour (${Object.entries(o.tier_prices || {}).map(([t, p]) => t + " " + p).join(", ") || o.tiers.join(", ")}); ` +
    `windows: ${(o.weekly || []).join(", ") || "always"}; leases ${o.min_duration}–${o.max_duration}; expires ${when(o.expires)}`) : el("p", { class: "muted" }, "no offer published now"));
}

function renderProvider() {
  const st = state.status;
  const p = st && st.pricing;
  if (!p) return;
  fill($("#pricing tbody"), p.tiers.map((t) => el("tr", {}, td(t.tier), num(t.price + " " + p.currency), num(t.would_set), num(t.comparable))), "–", 4);
  fill($("#fill tbody"), p.fill.map((w) => el("tr", {}, td(w.window + (w.peak ? " (peak)" : "")), num(w.offered_gpu_hours.toFixed(1)), num(w.leased_gpu_hours.toFixed(1)), num((100 * w.fill_rate).toFixed(1) + " %"))), "–", 4);
  const days = p.earned_per_day || [];
  chart("#earn-chart", {
    scales: { x: { time: true, range: (u, lo, hi) => [lo - 86400, hi + 86400] } },
    axes: [{}, { label: p.currency, values: precise }],
    legend: { show: false },
    series: [{}, { label: "earned", fill: "#2f6fb088", stroke: "#2f6fb0", paths: uPlot.paths.bars({ size: [0.6, 60] }), points: { show: false } }],
  }, [days.map((d) => Date.parse(d.day + "T12:00:00Z") / 1000), days.map((d) => parseFloat(d.amount))]);
  const sold = state.leases.filter((l) => l.role === "provider").sort((a, b) => (b.start || "").localeCompare(a.start || "")).slice(0, 20);
  fill($("#calendar tbody"), sold.map((l) => el("tr", {}, td(short(l.id)), td((l.assigned_gpus || []).length ? l.assigned_gpus.length + " of this machine's" : l.gpus), td(when(l.start)), td(when(l.end)), td(l.state))), "no leases sold", 5);
}

// ---------- status, pages, events ----------

function renderStatus() {
  const st = state.status;
  if (!st) return;
  $("#node-line").textContent = `${short(st.peer_id)} · ${st.mode}${st.provider ? " provider" : ""} · ${st.peers} peers · ${st.offers} offers · swarm ${st.swarm}`;
}

const pages = {
  market: () => loadMarket(),
  swarm: () => { renderTopics(); return loadSwarm(); },
  leases: () => { renderLeases(); return loadLedger(); },
  gpus: () => { renderGPUs(); renderProvider(); },
};

function route() {
  const parts = (location.hash || "#/market").slice(2).split("/");
  const page = pages[parts[0]] ? parts[0] : "market";
  state.page = page;
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "page-" + page;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === page);
  if (page === "leases" && parts[1]) selectLease(decodeURIComponent(parts[1]));
  return Promise.resolve(pages[page]()).catch((e) => showError(e.message));
}

function listen() {
  const es = new EventSource("/v1/events");
  const on = (name, f) => es.addEventListener(name, (ev) => {
    const prev = state[name];
    state[name] = JSON.parse(ev.data);
    f(prev);
  });
  es.onopen = () => { $("#live").textContent = "live"; $("#live").classList.add("on"); };
  es.onerror = () => { $("#live").textContent = "reconnecting…"; $("#live").classList.remove("on"); };
  on("status", (prev) => {
    renderStatus();
    if (state.page === "market" && prev && (prev.offers !== state.status.offers)) refreshMarket();
    if (state.page === "swarm") renderTopics();
    if (state.page === "swarm" && (!prev || prev.peers !== state.status.peers || prev.coordinate.samples !== state.status.coordinate.samples)) loadSwarm().catch((e) => showError(e.message));
    if (state.page === "gpus") renderProvider();
    if (state.page === "gpus" && !state.status.provider) renderGPUs();
  });
  on("leases", () => {
    if (state.page === "leases") { renderLeases(); loadLedger().catch((e) => showError(e.message)); }
    if (state.page === "gpus") renderProvider();
  });
  on("rentals", () => { if (state.page === "leases") renderLeases(); });
  on("gpus", () => { if (state.page === "gpus") renderGPUs(); });
}

$("#offer-filters").addEventListener("submit", (ev) => { ev.preventDefault(); loadMarket().catch((e) => showError(e.message)); });
$("#quote-form").addEventListener("submit", quote);
$("#rent-form").addEventListener("submit", rent);
window.addEventListener("hashchange", route);
// The page's first data first; then the stream of updates.
Promise.resolve(route()).finally(listen);
