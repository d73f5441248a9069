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

// fill puts rows in tbody, or one row that says what would fill it.
function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: cols || 8, class: "muted" }, empty))]));
}

const td = (v, cls) => el("td", { class: cls }, v);
// idTd is a cell of an identifier, which may break anywhere; shortTd
// one of an identifier's end (short), which keeps to one line.
const idTd = (v) => td(v, "id");
const shortTd = (id) => td(short(id), "short");
const num = (v) => td(v, "num");
const short = (id) => (id ? "…" + id.slice(-8) : "");
const ms = (v) => (v > 0 ? v.toFixed(1) + " ms" : "–");
const when = (t) => (t && !t.startsWith("0001") ? new Date(t).toLocaleString([], { dateStyle: "short", timeStyle: "short" }) : "–");

// plural counts a noun: "1 offer", "2 offers".
const plural = (n, one, many) => `${n} ${n === 1 ? one : many || one + "s"}`;

// amount shows a decimal amount of money (the API's exact string): cents
// from 1 up, four places below, two significant digits below that.
function amount(s) {
  const v = parseFloat(s);
  if (!isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a === 0 || a >= 1) return v.toFixed(2);
  if (a >= 0.0001) return v.toFixed(4).replace(/(\.\d\d)0+$/, "$1");
  return String(+v.toPrecision(2));
}

// money is a table cell of an amount in currency, per what (a unit such
// as "GPU-h"), of a tier where it names one; the exact figure in its
// title and data-amount.
function money(s, currency, per, tier) {
  const c = num(amount(s) + (currency ? " " + currency : "") + (per ? "/" + per : "") + (tier ? " " + tier : ""));
  c.title = s + " " + (currency || "");
  c.dataset.amount = s;
  if (tier) c.dataset.tier = tier;
  return c;
}

// gpuHours shows GPU-hours: tenths from 10 up, hundredths below, and
// a bound where hundredths would read a little as none.
const gpuHours = (h) => (h > 0 && h < 0.01 ? "< 0.01" : h.toFixed(h >= 10 ? 1 : 2)) + " GPU-h";

// tierPrice is the price offer o sells tier t at: its own price for t,
// else its base price.
const tierPrice = (o, t) => (o.tier_prices && o.tier_prices[t]) || o.price;
const pct = (v) => (100 * v).toFixed(0) + " %";

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

const chartHeight = 240;

// Each chart is as wide as its box, which the page's width sets: a box
// that changes width (the window's, or the columns' at a breakpoint)
// redraws its chart to fit.
const chartBoxes = new ResizeObserver((entries) => {
  for (const e of entries) {
    const c = charts["#" + e.target.id];
    const w = Math.floor(e.contentRect.width);
    if (c && w > 0 && w !== c.width) c.setSize({ width: w, height: chartHeight });
  }
});

// chart draws (or redraws with new data) the uPlot chart in div id; with
// no data it says instead what would fill it (empty).
function chart(id, opts, data, empty) {
  let c = charts[id];
  const box = $(id);
  if (empty) {
    if (c) c.destroy();
    delete charts[id];
    box.classList.add("empty");
    box.replaceChildren(el("p", { class: "muted empty-note" }, empty));
    return null;
  }
  if (c && c.series.length === opts.series.length) {
    c.setData(data);
    return c;
  }
  if (c) c.destroy();
  box.classList.remove("empty");
  box.replaceChildren();
  c = charts[id] = new uPlot(Object.assign({ width: Math.max(200, box.clientWidth || 480), height: chartHeight }, opts), data, box);
  chartBoxes.observe(box);
  return c;
}

// fitAxis sizes a vertical axis to its widest tick label, so no label
// runs into the axis's name or off the chart.
const fitAxis = (u, values) => 18 + 7.5 * Math.max(2, ...(values || []).map((v) => String(v).length));

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
  const tier = new FormData($("#offer-filters")).get("tier");
  const at = tier ? `the ${tier} tier` : "each offer's cheapest tier";
  $("#market-line").textContent = `${plural(m.offers, "offer")} in the book ${m.offers === 1 ? "matches" : "match"}; ${m.priced} priced in ${m.currency || "–"} per GPU-hour, at ${at}`;
  const none = "No offers match: widen the filters, or wait while the book syncs from peers.";
  fill($("#models tbody"), m.models.map((x) => el("tr", { "data-model": x.model },
    td(x.model), num(x.offers), num(x.gpus), num(x.providers), money(x.min), money(x.median), money(x.p90))), none, 7);
  $("#models-title").textContent = `Offers by model (prices in ${m.currency || "–"}/GPU-h, ${tier || "each offer's cheapest tier"})`;
  fill($("#cheapest tbody"), m.cheapest.map((o) => el("tr", { "data-provider": o.provider, "data-offer": o.id },
    shortTd(o.provider), td(o.gpus.map((g) => g.count + " × " + g.model).join(", ")), td(o.country),
    money(o.listed_price || o.price, o.currency, "GPU-h", o.listed_tier),
    td(o.tiers.filter((t) => t !== o.listed_tier).map((t) => `${t} ${amount(tierPrice(o, t))}`).join(", ") || "–"),
    num(ms(o.rtt_ms)), num(pct(o.reliability)))), none, 7);
  performance.mark("market:tables");
  const h = m.histogram;
  const xs = h.counts.map((_, i) => +(h.from + (i + 0.5) * h.width).toFixed(4));
  chart("#price-chart", {
    scales: { x: { time: false } },
    axes: [{ label: `${m.currency}/GPU-h, ${tier || "cheapest tier"}` }, { label: "offers", size: fitAxis, values: (u, vs) => vs.map((v) => (Number.isInteger(v) ? v : "")) }],
    legend: { show: false },
    series: [{}, { label: "offers", fill: "#1f6f4a88", stroke: "#1f6f4a", paths: uPlot.paths.bars({ size: [0.9, 40] }), points: { show: false } }],
  }, [xs, h.counts], m.priced ? null : "No prices to chart: the histogram fills as offers that match the filters reach the book.");
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
  const line = el("p", { class: "muted", id: "quote-line" }, r.explained ? `${r.feasible} of ${plural(r.considered, "offer")} fit` : `the best ${r.candidates.length}, of ${plural(r.considered, "offer")} checked`);
  if (!r.candidates.length) {
    return el("div", { id: "quote-none" }, line,
      el("p", {}, r.explanation || "nothing fits"),
      el("ul", { class: "explain" }, (r.reasons || []).map((x) =>
        el("li", { "data-check": x.check }, el("b", {}, plural(x.offers, "offer") + ": "), x.kind, el("span", { class: "muted" }, " (e.g. " + x.example + ")")))),
      (r.nearest || []).length ? el("p", {}, "The book has instead: " + r.nearest.map((n) => `${n.model} (${plural(n.offers, "offer")}${n.from ? ", from " + amount(n.from) + "/GPU-h for " + plural(n.gpus, "GPU") : ""})`).join(", ")) : null);
  }
  const tier = bidFromForm().tier;
  const th = (h, title) => el("th", { title: title }, h);
  return el("div", {}, line, el("table", { id: "candidates" },
    el("thead", {}, el("tr", {}, th("#"), th("Provider"), th("GPUs"), th("Price"),
      th("Effective price", "what the candidates are ranked by: the price, raised for the provider's unreliability and round-trip time; never below the price, and not what is paid"),
      th("Total", "the price of all the GPUs for the hours asked"), th("Start"), th("RTT"))),
    el("tbody", {}, r.candidates.map((c) => el("tr", { "data-provider": c.offer.provider, "data-offer": c.offer.id, "data-price": c.price },
      num(c.rank), shortTd(c.offer.provider), num(c.gpus + " × " + c.offer.gpus[0].model), money(c.price, c.offer.currency, "GPU-h", tier),
      money(c.effective_price, c.offer.currency, "GPU-h", tier), money(c.total, c.offer.currency),
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

// reachText says in words how peers reach this node (AutoNAT's state and
// the way in).
function reachText(r) {
  const state = { public: "This node is reachable from the internet", private: "This node is behind a NAT or firewall",
    unknown: "Whether peers can reach this node is not known yet (no peer has answered its dial-back check)" }[r.state] || "This node's reachability: " + r.state;
  const how = { direct: "peers dial it directly", relayed: "peers reach it through relays", none: "no peer can dial it yet" }[r.how] || r.how;
  return `${state}; ${how}.`;
}

async function loadSwarm() {
  const peers = await api("/v1/peers");
  const st = state.status;
  $("#swarm-line").textContent = st ? `${plural(peers.length, "peer")} connected. ${reachText(st.reachability)} ` +
    `Its network coordinate is off by about ${pct(st.coordinate.error)} of the RTTs it predicts, from ${plural(st.coordinate.samples, "RTT sample")} (${plural(st.coordinate.peers, "peer")}' coordinates held).` : "";
  fill($("#peers tbody"), peers.map((p) => el("tr", { "data-peer": p.id },
    shortTd(p.id), num(ms(p.rtt_ms)), num(ms(p.estimated_rtt_ms)), td(p.relayed ? "relayed" : "direct"),
    td(p.near ? "near" : ""), num(pct(p.reliability)), td(p.basis), idTd(p.agent))), "No peers connected: the node dials its bootstrap peers as it starts, and others as it finds them.");
  const placed = peers.filter((p) => p.coordinate_vector && p.coordinate_vector.length);
  if (!(st && st.coordinate.vector && st.coordinate.vector.length && placed.length)) {
    chart("#coord-chart", null, null, "No coordinates to place yet: peers appear here once this node has measured RTTs to them and learnt their coordinates.");
  } else {
    const pts = project([st.coordinate.vector, ...placed.map((p) => p.coordinate_vector)]);
    const rows = pts.map((xy, i) => ({ x: xy[0], y: xy[1], kind: i === 0 ? 2 : placed[i - 1].near ? 1 : 0 }));
    rows.sort((a, b) => a.x - b.x);
    const ys = (k) => rows.map((r) => (r.kind === k ? r.y : null));
    const pt = (color, size) => ({ stroke: color, fill: color, paths: () => null, points: { show: true, size: size, fill: color } });
    chart("#coord-chart", {
      scales: { x: { time: false } },
      axes: [{ label: "ms", values: precise }, { label: "ms", values: precise, size: fitAxis }],
      legend: { live: false },
      series: [{ label: "x" }, Object.assign({ label: "peer" }, pt("#2f6fb0", 7)), Object.assign({ label: "near" }, pt("#1f6f4a", 9)), Object.assign({ label: "this node" }, pt("#b0302f", 11))],
    }, [rows.map((r) => r.x), ys(0), ys(1), ys(2)]);
  }
}

function renderTopics() {
  const st = state.status;
  if (!st) return;
  fill($("#topics tbody"), Object.entries(st.topics || {}).sort().map(([t, v]) => el("tr", {}, td(t), num(v.peers), num(v.mesh))), "No gossip topics joined yet: the node joins the market's as it starts.", 3);
}

// ---------- My leases ----------

// costSoFar is the cell of what lease l bills so far: the node's figure,
// which is the receipt's amount once the lease ended and, before, what
// its receipt would meter now (to the last verified beat), never the
// wall clock's guess.
function costSoFar(l) {
  const c = money(l.cost, l.currency);
  c.title = `${l.cost} ${l.currency} for ${l.metered_seconds} s metered to the last verified beat`;
  c.dataset.metered = l.metered_seconds;
  c.classList.add("cost");
  return c;
}

function renderLeases() {
  const leases = [...state.leases].sort((a, b) => (b.start || "").localeCompare(a.start || ""));
  fill($("#rentals tbody"), state.rentals.map((r) => el("tr", { "data-rental": r.id },
    idTd(r.id), td(r.state), td(r.lease ? short(r.lease) : "–"), td(r.error || r.status || r.progress[r.progress.length - 1] || ""))), "None started here yet: quote on the market page, then Rent.", 4);
  fill($("#leases tbody"), leases.map((l) => el("tr", { "data-lease": l.id, class: l.id === state.selected ? "selected" : "" },
    td(el("a", { href: "#/leases/" + l.id }, short(l.id)), "short"), td(l.role), td(l.state), shortTd(l.role === "renter" ? l.provider : l.renter),
    num(l.gpus), money(l.price, l.currency, "GPU-h", l.tier), costSoFar(l), num(l.beats), td(when(l.end)),
    td(l.ended ? "" : el("button", { class: "secondary cancel", "data-lease": l.id, onclick: () => cancelLease(l.id) }, armed(l.id) ? "Stop the job?" : "Cancel")))),
    "No leases yet: rent GPUs from the market page, or sell this node's as a provider.", 10);
  // Follow the newest lease of a rental started here, or the one picked.
  if (!state.selected && state.follow) {
    const r = state.rentals.find((x) => x.id === state.follow);
    if (r && r.lease) selectLease(r.lease);
  }
  const sel = state.leases.find((l) => l.id === state.selected);
  if (sel) $("#output-state").textContent = sel.state + (sel.ended ? "" : ` · ${amount(sel.cost)} ${sel.currency} so far, for ${sel.metered_seconds} s · ${plural(sel.beats, "beat")} verified`);
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
    shortTd(r.lease_id), td(r.outcome), num(r.metered_seconds + " s"), money(r.amount, r.currency), num(r.exit_code), td(r.signed_by.join(", ")))),
    "No receipts yet: each lease ends with one, signed by both sides.", 6);
  fill($("#ledger tbody"), ledger.map((e) => el("tr", {}, shortTd(e.peer), money(e.balance, e.currency), num(e.receipts))), "No balances yet: each receipt moves one.", 3);
}

// ---------- My GPUs ----------

const series = { t: [], util: {}, power: {} };
const keepSamples = 150; // five minutes at a reading every two seconds

function renderGPUs() {
  const g = state.gpus;
  const seller = state.status && state.status.provider;
  // A node that sells nothing has nothing to chart: it says so, and how
  // to start, instead of empty charts and tables.
  $("#gpus-body").hidden = !g && !seller;
  if (!g) {
    $("#gpus-line").textContent = state.status && !seller ?
      "This node sells no GPUs, so it has no readings, offer or earnings to show. To sell, set provider.enabled = true in its config.toml and restart it: " +
      "this page then shows its GPUs' use, power and temperature, the offer it publishes and its prices, and what it earns." : "Reading the GPUs…";
    return;
  }
  $("#gpus-line").textContent = g.unavailable ? g.unavailable : `${plural(g.gpus.length, "GPU")} read from ${g.source}${g.driver ? ", driver " + g.driver : ""}`;
  fill($("#gpus tbody"), g.gpus.map((x) => el("tr", { "data-uuid": x.uuid },
    num(x.index), td(x.model), num(x.utilization_pct + " %"), num(`${x.memory_used_mib} / ${x.memory_mib} MiB`), num(x.temperature_c + " °C"),
    num(`${x.power_draw_watts.toFixed(0)} / ${x.power_limit_watts.toFixed(0)} W`), td(x.lease ? short(x.lease) : "free"))),
    g.unavailable ? "No GPUs read: " + g.unavailable : "No GPUs found by " + g.source + ".", 7);
  series.t.push(Date.now() / 1000);
  for (const x of g.gpus) {
    (series.util[x.index] ||= []).push(x.utilization_pct);
    (series.power[x.index] ||= []).push(x.power_draw_watts);
  }
  if (series.t.length > keepSamples) {
    series.t.shift();
    for (const m of [series.util, series.power]) for (const k in m) m[k].shift();
  }
  // The legend names each GPU (the table above has its readings): a
  // legend of values would read "--" but under the cursor.
  const lines = (m) => Object.keys(m).map((k, i) => ({ label: "GPU " + k, stroke: palette[i % palette.length], width: 1.5 }));
  const data = (m) => [series.t, ...Object.keys(m).map((k) => m[k])];
  const legend = { live: false };
  chart("#util-chart", { scales: { y: { range: [0, 100] } }, legend, axes: [{}, { size: fitAxis, values: (u, vs) => vs.map((v) => v + " %") }], series: [{}, ...lines(series.util)] }, data(series.util),
    g.gpus.length ? null : "No GPUs to chart.");
  chart("#power-chart", { legend, axes: [{}, { size: fitAxis, values: (u, vs) => vs.map((v) => v + " W") }], series: [{}, ...lines(series.power)] }, data(series.power),
    g.gpus.length ? null : "No GPUs to chart.");
  const o = g.offer;
  $("#own-offer").replaceChildren(o ? el("p", { id: "own-offer-line" },
    `${o.gpus.map((x) => x.count + " × " + x.model).join(", ")} in ${o.country || "–"}, per GPU-hour: ${o.tiers.map((t) => `${t} ${amount(tierPrice(o, t))} ${o.currency}`).join(", ")}; ` +
    `windows: ${(o.weekly || []).join(", ") || "always"}; leases from ${o.min_duration} to ${o.max_duration}; expires ${when(o.expires)}`) :
    el("p", { class: "muted" }, "No offer published now: the provider publishes one once its GPUs are read and free in a selling window."));
}

function renderProvider() {
  const st = state.status;
  const p = st && st.pricing;
  if (!p) return;
  fill($("#pricing tbody"), p.tiers.map((t) => el("tr", {}, td(t.tier), money(t.price, p.currency, "GPU-h"), money(t.would_set, p.currency, "GPU-h"), num(t.comparable))),
    "No tiers priced: the offer is not published yet.", 4);
  fill($("#fill tbody"), p.fill.map((w) => el("tr", {}, td(w.window + (w.peak ? " (peak)" : "")), num(gpuHours(w.offered_gpu_hours)), num(gpuHours(w.leased_gpu_hours)), num((100 * w.fill_rate).toFixed(1) + " %"))),
    "No selling windows yet: fill rates appear once the offer is published.", 4);
  $("#earn-title").textContent = `Earnings per day (${p.currency})`;
  const days = earningDays(p.earned_per_day || []);
  chart("#earn-chart", {
    scales: { x: { time: true, range: () => [days.from, days.to] } },
    axes: [{ space: 60 }, { values: precise, size: fitAxis }],
    legend: { show: false },
    series: [{}, { label: "earned", fill: "#2f6fb088", stroke: "#2f6fb0", paths: uPlot.paths.bars({ size: [0.6, 60], align: 0 }), points: { show: false } }],
  }, [days.xs, days.ys], days.earned ? null : "No earnings yet: a day's bar appears once a lease sold here ends with a signed receipt, on the day it ended.");
  const sold = state.leases.filter((l) => l.role === "provider").sort((a, b) => (b.start || "").localeCompare(a.start || "")).slice(0, 20);
  fill($("#calendar tbody"), sold.map((l) => el("tr", {}, shortTd(l.id), td(plural((l.assigned_gpus || []).length || l.gpus, "GPU")), td(when(l.start)), td(when(l.end)), td(l.state))),
    "No leases sold yet: a renter's lease of this node's GPUs appears here from when it is signed.", 5);
}

// earningDays lays the earnings out on a calendar of whole UTC days (the
// API's days; at least the last week): a bar each at the day's noon, on
// an axis from the first day's start to the last day's end, so a bar
// sits on its own day whatever the number of days.
function earningDays(per) {
  const day = 86400;
  const byDay = new Map(per.map((d) => [Date.parse(d.day + "T00:00:00Z") / 1000, parseFloat(d.amount) || 0]));
  const today = Math.floor(Date.now() / 1000 / day) * day;
  let last = Math.max(today, ...byDay.keys());
  let first = Math.min(last - 6 * day, ...byDay.keys());
  const xs = [], ys = [];
  for (let t = first; t <= last; t += day) {
    xs.push(t + day / 2);
    ys.push(byDay.get(t) || 0);
  }
  return { xs, ys, from: first, to: last + day, earned: ys.some((y) => y > 0) };
}

// ---------- status, pages, events ----------

function renderStatus() {
  const st = state.status;
  if (!st) return;
  const role = st.provider ? "sells GPUs" : "rents only";
  const dht = { server: "DHT server (answers peers' lookups)", client: "DHT client (asks, never answers)" }[st.mode] || "DHT mode " + st.mode;
  $("#node-line").textContent = `node ${short(st.peer_id)} · ${role} · ${dht} · ${plural(st.peers, "peer")} · ${plural(st.offers, "offer")} in the book · swarm ${st.swarm}`;
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
