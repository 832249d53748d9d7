// roofline web page: plain JS, no dependencies, no network beyond this server.
// The chart is the server's SVG (roofline-report, the same renderer as `roofline plot`, with its axes, labels
// and legend); this script adds hover tooltips, point selection and the measured overlay on top of its data-*
// attributes (g.point: data-label, data-time-us, data-ai, data-bound, data-measured-us).
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

const state = {
  hardware: [],
  formats: [],
  selected: new Set(),
  report: null, // last PredictReport
  measured: new Map(), // label -> DualPoint from POST /api/measure (for the current shape/hardware)
  measuredKey: "",
  selectedLabel: null,
  gpu: { available: false, reason: "" },
  seq: 0,
  nvmlTimer: null,
  powerHistory: new Map(),
};

// Dense formats POST /api/measure can time (cuBLASLt).
const MEASURABLE = ["FP32", "TF32", "FP16", "BF16", "FP8_E4M3", "FP8_E5M2", "INT8"];
// Weight-only schemes ("W:<weights> A:<activations>") it times on roofline's GEMV kernels, at M <= 16.
const WO_MEASURABLE = ["FP16", "BF16", "FP8_E4M3", "INT8", "INT4_G128", "NF4", "MXFP4", "NVFP4"];
const WO_MAX_M = 16;

// The /api/measure body fields of a format or scheme label, or null when nothing measures it at `m` rows.
function measureFields(label, m) {
  const wo = /^W:(\S+) A:(FP16|BF16)$/.exec(label);
  if (wo) return WO_MEASURABLE.includes(wo[1]) && m <= WO_MAX_M ? { weights: wo[1], activations: wo[2] } : null;
  return MEASURABLE.includes(label) ? { precision: label } : null;
}
// Weight-only schemes offered next to the catalog's uniform formats.
const WEIGHT_ONLY = ["W:INT4_G128 A:FP16", "W:NF4 A:FP16", "W:FP8_E4M3 A:FP16"];
// Checked by default when the hardware runs them natively.
const DEFAULT_FORMATS = ["BF16", "FP16", "FP8_E4M3", "INT8", "INT4", "NVFP4", "MXFP4"];

// ---------- formatting ----------
function sig(v, digits = 3) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) return v.toExponential(digits - 1);
  return Number(v.toPrecision(digits)).toLocaleString("en-US", { maximumFractionDigits: 6 });
}
function fmtTime(us) {
  if (!Number.isFinite(us)) return "–";
  if (us >= 1e6) return sig(us / 1e6) + " s";
  if (us >= 1e3) return sig(us / 1e3) + " ms";
  if (us >= 1) return sig(us) + " µs";
  return sig(us * 1e3) + " ns";
}
function si(v, unit = "") {
  if (!Number.isFinite(v)) return "–";
  const steps = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [s, p] of steps) if (Math.abs(v) >= s) return sig(v / s) + " " + p + unit;
  return sig(v) + (unit ? " " + unit : "");
}
function bytes(v) { return si(v, "B"); }
function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function boundBadge(b) { return `<span class="bound bound-${esc(b)}">${esc(b)}</span>`; }

// ---------- API ----------
class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.field = body ? body.field : null;
  }
}
async function api(path, body) {
  const opts = body === undefined ? {} : { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) };
  const resp = await fetch(path, opts);
  const type = resp.headers.get("content-type") || "";
  if (!resp.ok) {
    let err = null;
    if (type.includes("json")) { try { err = await resp.json(); } catch (_) { err = null; } }
    throw new ApiError(resp.status, err);
  }
  return type.includes("json") ? resp.json() : resp.text();
}
function hwKey() { return $("#hardware").value; }
function q(params) { return new URLSearchParams(params).toString(); }

// ---------- shape inputs ----------
function readShape() {
  const out = {};
  let bad = null;
  for (const id of ["m", "n", "k", "batch"]) {
    const el = $("#" + id);
    const v = Number(el.value);
    const ok = Number.isInteger(v) && v >= 1 && v <= 16777216;
    el.classList.toggle("invalid", !ok);
    if (!ok && !bad) bad = `${id.toUpperCase() === "BATCH" ? "batch" : id.toUpperCase()} must be an integer from 1 to 16777216`;
    out[id] = v;
  }
  return bad ? { error: bad } : out;
}
function showError(el, err) {
  if (!err) { el.hidden = true; el.textContent = ""; return; }
  el.hidden = false;
  el.textContent = err.field ? `${err.field}: ${err.message}` : err.message;
}

// ---------- formats ----------
async function loadFormats() {
  state.formats = await api("/api/formats?" + q({ hardware_key: hwKey() }));
  const native = new Set(state.formats.filter((f) => f.native).map((f) => f.name));
  const keep = new Set([...state.selected].filter((s) => native.has(s) || s.includes(":")));
  state.selected = keep.size ? keep : new Set(DEFAULT_FORMATS.filter((f) => native.has(f)));
  if (native.has("FP16") && !state.selected.size) state.selected.add("FP16");
  if (!state.selected.size) for (const f of native) if (f !== "FP64") { state.selected.add(f); break; }
  if (native.has("FP16") && !keep.size) state.selected.add(WEIGHT_ONLY[0]);
  renderChips();
  fillFormatSelects();
}
function renderChips() {
  const box = $("#format-chips");
  box.innerHTML = "";
  const entries = state.formats.filter((f) => f.name !== "FP64").map((f) => ({
    label: f.name, native: f.native, title: `${f.name}: ${f.description} (${sig(f.effective_bits)} bits/element${f.native ? ", native" : ", not native here: dequantized"})`,
  }));
  for (const w of WEIGHT_ONLY) entries.push({ label: w, native: true, title: `${w}: weight-only (weights dequantized in the kernel, FP16 math)` });
  for (const e of entries) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "chip" + (e.native ? "" : " emulated");
    b.textContent = e.label;
    b.title = e.title;
    b.dataset.format = e.label;
    b.setAttribute("aria-pressed", state.selected.has(e.label) ? "true" : "false");
    b.addEventListener("click", () => {
      if (state.selected.has(e.label)) state.selected.delete(e.label); else state.selected.add(e.label);
      b.setAttribute("aria-pressed", state.selected.has(e.label) ? "true" : "false");
      scheduleUpdate();
    });
    box.appendChild(b);
  }
}
function fillFormatSelects() {
  for (const sel of $$(".format-select")) {
    const cur = sel.value || sel.dataset.default;
    sel.innerHTML = state.formats.filter((f) => f.name !== "FP64").map((f) => `<option value="${esc(f.name)}">${esc(f.name)}${f.native ? "" : " (dequant)"}</option>`).join("");
    sel.value = state.formats.some((f) => f.name === cur) ? cur : sel.dataset.default;
  }
}

// ---------- GEMM analysis ----------
let updateTimer = null;
function scheduleUpdate(delay = 180) {
  clearTimeout(updateTimer);
  updateTimer = setTimeout(update, delay);
}
async function update() {
  const shape = readShape();
  const errEl = $("#gemm-error");
  if (shape.error) { showError(errEl, { message: shape.error }); return; }
  const schemes = [...state.selected];
  if (!schemes.length) { showError(errEl, { message: "select at least one format" }); return; }
  showError(errEl, null);
  const key = `${hwKey()}|${shape.m}|${shape.n}|${shape.k}|${shape.batch}`;
  if (key !== state.measuredKey) { state.measured.clear(); state.measuredKey = key; $("#measure-status").textContent = ""; }
  const seq = ++state.seq;
  const body = { m: shape.m, n: shape.n, k: shape.k, batch: shape.batch, schemes };
  try {
    const [report, svg, rec] = await Promise.all([
      api("/api/analyze?" + q({ hardware_key: hwKey() }), body),
      chartSvg(shape, schemes),
      api("/api/recommend?" + q({ hardware_key: hwKey() }), { m: shape.m, n: shape.n, k: shape.k, batch: shape.batch }).catch((e) => e),
    ]);
    if (seq !== state.seq) return; // a newer request superseded this one
    state.report = report;
    renderChart(svg);
    renderTable(report);
    renderRecommendation(rec);
    document.body.dataset.ready = String(seq);
  } catch (e) {
    if (seq !== state.seq) return;
    showError(errEl, e);
  }
}
function plotQuery(shape, schemes) {
  return q({ hardware_key: hwKey(), m: shape.m, n: shape.n, k: shape.k, batch: shape.batch, formats: schemes.join(","), width: 1000, height: 600 });
}
function chartSvg(shape, schemes) {
  $("#svg-link").href = "/api/plot.svg?" + plotQuery(shape, schemes);
  if (!state.measured.size) return api("/api/plot.svg?" + plotQuery(shape, schemes));
  // With measurements: send every point (predicted ones by their scheme, measured ones as measured).
  const points = schemes.map((label) => state.measured.get(label) || null);
  return api("/api/analyze?" + q({ hardware_key: hwKey() }), { m: shape.m, n: shape.n, k: shape.k, batch: shape.batch, schemes }).then((rep) => {
    const pts = rep.rows.map((row, i) => {
      const m = points[i] || state.measured.get(row.label);
      if (m) return { label: row.label, gemm: m.gemm, measurement: m.measurement };
      return { label: row.label, gemm: { m: shape.m, n: shape.n, k: shape.k, batch: shape.batch, weights_shared: true, scheme: row.scheme } };
    });
    const title = `${rep.hardware_name} — GEMM M=${shape.m} N=${shape.n} K=${shape.k}${shape.batch > 1 ? " batch=" + shape.batch : ""} (● measured)`;
    return api("/api/plot.svg?" + q({ hardware_key: hwKey() }), { points: pts, title, width: 1000, height: 600 });
  });
}

// ---------- chart ----------
function renderChart(text) {
  const box = $("#chart");
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const svg = doc.documentElement;
  if (!svg || svg.nodeName !== "svg") { box.innerHTML = '<div class="placeholder">chart unavailable</div>'; return; }
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Roofline chart");
  box.replaceChildren(document.importNode(svg, true));
  const live = $("svg", box);
  for (const g of $$("g.point", live)) {
    g.addEventListener("mousemove", (ev) => showTooltip(g, ev));
    g.addEventListener("mouseleave", hideTooltip);
    g.addEventListener("click", () => selectLabel(g.dataset.label, true));
  }
  markSelection();
}

function rowFor(label) { return state.report ? state.report.rows.find((r) => r.label === label) : null; }
function showTooltip(g, ev) {
  const tt = $("#tooltip");
  const row = rowFor(g.dataset.label);
  const meas = state.measured.get(g.dataset.label);
  const lines = [
    ["time", fmtTime(Number(g.dataset.timeUs))],
    ["AI", sig(Number(g.dataset.ai)) + " FLOP/B"],
    ["bound", g.dataset.bound],
  ];
  if (row) {
    lines.push(["TFLOP/s", sig(row.prediction.attainable_tflops)]);
    if (row.speedup_vs_fp16) lines.push(["vs FP16", sig(row.speedup_vs_fp16) + "×"]);
  }
  const measuredUs = g.dataset.measuredUs ? Number(g.dataset.measuredUs) : meas ? meas.measurement.time_us : null;
  if (measuredUs) lines.push(["measured", fmtTime(measuredUs)]);
  tt.innerHTML = `<div class="tt-title">${esc(g.dataset.label)}</div><table>${lines.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join("")}</table>`;
  tt.hidden = false;
  const card = $("#chart-panel").getBoundingClientRect();
  let x = ev.clientX - card.left + 14, y = ev.clientY - card.top + 14;
  if (x + tt.offsetWidth > card.width - 8) x = ev.clientX - card.left - tt.offsetWidth - 14;
  tt.style.left = x + "px";
  tt.style.top = y + "px";
}
function hideTooltip() { $("#tooltip").hidden = true; }

function selectLabel(label, scroll) {
  state.selectedLabel = label;
  markSelection();
  renderDetail();
  if (scroll) {
    const tr = $$("#predict-table tbody tr").find((r) => r.dataset.label === label);
    if (tr) tr.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }
}
function markSelection() {
  for (const g of $$("#chart g.point")) g.classList.toggle("selected", g.dataset.label === state.selectedLabel);
  for (const tr of $$("#predict-table tbody tr")) tr.classList.toggle("selected", tr.dataset.label === state.selectedLabel);
}

// ---------- prediction table ----------
function runsAs(p) {
  if (p.mode === "native") return `${p.compute} native`;
  if (p.mode === "weight_only") return `${p.compute} (W dequant)`;
  return `${p.compute} (emulated)`;
}
function renderTable(r) {
  const kind = r.m === 1 ? "GEMV" : "GEMM";
  $("#table-caption").textContent = `${kind} M=${r.m} N=${r.n} K=${r.k}${r.batch > 1 ? " × batch " + r.batch : ""} on ${r.hardware_name} [${r.hardware}] · source: ${r.hardware_source}`;
  const tbody = $("#predict-table tbody");
  tbody.innerHTML = r.rows.map((row) => {
    const p = row.prediction;
    const m = state.measured.get(row.label);
    const mt = m ? m.measurement.time_us : null;
    const err = mt ? (mt - p.time_us) / mt : null;
    const errCls = err === null ? "" : Math.abs(err) <= 0.25 ? "err-good" : "err-bad";
    return `<tr data-label="${esc(row.label)}" class="${row.best ? "best" : ""}">
      <td class="scheme">${esc(row.label)}</td><td>${esc(runsAs(p))}</td>
      <td class="num">${si(p.flops)}</td><td class="num">${bytes(p.bytes)}</td>
      <td class="num">${sig(p.arithmetic_intensity)}</td><td class="num">${sig(p.ridge_ai)}</td>
      <td>${boundBadge(p.bound)}</td><td class="num">${fmtTime(p.time_memory_us)}</td><td class="num">${fmtTime(p.time_compute_us)}</td>
      <td class="num"><b>${fmtTime(p.time_us)}</b></td><td class="num">${sig(p.attainable_tflops)}</td>
      <td class="num">${row.speedup_vs_fp16 ? sig(row.speedup_vs_fp16) + "×" : "–"}</td>
      <td class="num">${mt ? fmtTime(mt) : "–"}</td><td class="num ${errCls}">${err === null ? "–" : (err * 100).toFixed(1) + "%"}</td></tr>`;
  }).join("");
  for (const tr of $$("tr", tbody)) tr.addEventListener("click", () => selectLabel(tr.dataset.label, false));
  if (state.selectedLabel && !rowFor(state.selectedLabel)) state.selectedLabel = null;
  markSelection();
  renderDetail();
}
function renderDetail() {
  const box = $("#point-detail");
  const row = state.selectedLabel ? rowFor(state.selectedLabel) : null;
  if (!row) { box.hidden = true; return; }
  const p = row.prediction;
  const m = state.measured.get(row.label);
  const items = [
    ["scheme", `W ${row.scheme.weights} · A ${row.scheme.activations} · O ${row.scheme.output}`],
    ["runs as", runsAs(p)], ["FLOPs", si(p.flops)], ["bytes", bytes(p.bytes)],
    ["arithmetic intensity", sig(p.arithmetic_intensity) + " FLOP/B"], ["ridge", sig(p.ridge_ai) + " FLOP/B"],
    ["peak", sig(p.peak_tflops) + " TFLOP/s"], ["bandwidth", sig(p.bandwidth_gb_s) + " GB/s"],
    ["t memory", fmtTime(p.time_memory_us)], ["t compute", fmtTime(p.time_compute_us)],
    ["overhead", fmtTime(p.overhead_us)], ["predicted time", fmtTime(p.time_us)],
    ["bound", p.bound], ["attainable", sig(p.attainable_tflops) + " TFLOP/s"],
    ["vs FP16", row.speedup_vs_fp16 ? sig(row.speedup_vs_fp16) + "×" : "–"],
  ];
  if (m) {
    items.push(["measured (median)", fmtTime(m.measurement.time_us)], ["measured TFLOP/s", sig(m.measurement.tflops)],
      ["measured GB/s", sig(m.measurement.bandwidth_gb_s)], ["device", m.measurement.device], ["kernel", m.measurement.kernel]);
  }
  box.innerHTML = `<h3>${esc(row.label)}${row.best ? " — fastest" : ""}</h3><dl>${items.map(([k, v]) => `<div><dt>${esc(k)}</dt><dd>${esc(v)}</dd></div>`).join("")}</dl>${p.note ? `<div class="note">${esc(p.note)}</div>` : ""}`;
  box.hidden = false;
}

// ---------- recommendation ----------
function renderRecommendation(rec) {
  const box = $("#recommendation");
  if (rec instanceof Error) { box.innerHTML = `<div class="error">${esc(rec.field ? rec.field + ": " : "")}${esc(rec.message)}</div>`; return; }
  $("#rec-phase").textContent = `${rec.phase} · baseline ${rec.baseline}`;
  const win = rec.candidates.find((c) => c.name === rec.winner);
  if (!win) { box.innerHTML = `<p>${esc(rec.reason)}</p>`; return; }
  const top = rec.candidates.filter((c) => c.rank).sort((a, b) => a.rank - b.rank).slice(0, 5);
  box.innerHTML = `
    <div class="winner" id="rec-winner">${esc(rec.winner)}<span class="method">${esc(win.method)}</span></div>
    <p class="reason" id="rec-reason">${esc(rec.reason)}</p>
    <div class="stats">
      <div class="stat"><div class="v">${fmtTime(win.time_us)}</div><div class="l">predicted time</div></div>
      <div class="stat"><div class="v">${win.speedup_vs_fp16 ? sig(win.speedup_vs_fp16) + "×" : "–"}</div><div class="l">vs ${esc(rec.baseline)}</div></div>
      <div class="stat"><div class="v">${win.accuracy_prior_pct === null ? "–" : "+" + sig(win.accuracy_prior_pct) + "%"}</div><div class="l">perplexity prior</div></div>
    </div>
    <ol class="ranking">${top.map((c) => `<li title="${esc(c.accuracy_source || "")}"><span>${c.rank}. ${esc(c.name)} <span class="subtle">(${esc(c.method)})</span></span><span class="t">${fmtTime(c.time_us)}</span></li>`).join("")}</ol>
    ${rec.not_offered && rec.not_offered.length ? `<div class="not-offered">Not offered: ${rec.not_offered.map((n) => `${esc(n.name)} (${esc(n.reason)})`).join("; ")}</div>` : ""}`;
}

// ---------- measurement ----------
async function measureSelected() {
  const shape = readShape();
  if (shape.error) return;
  const todo = [...state.selected].filter((f) => measureFields(f, shape.m));
  const status = $("#measure-status");
  if (!todo.length) {
    status.textContent = `Select a measurable format (${MEASURABLE.join(", ")}; weight-only W:… A:FP16 schemes up to M = ${WO_MAX_M}).`;
    return;
  }
  const btn = $("#measure-btn");
  btn.disabled = true;
  try {
    for (const [i, f] of todo.entries()) {
      status.textContent = `Measuring ${f} (${i + 1}/${todo.length})…`;
      const dp = await api("/api/measure?" + q({ hardware_key: hwKey() }), { m: shape.m, n: shape.n, k: shape.k, ...measureFields(f, shape.m) });
      state.measured.set(f, dp);
    }
    status.textContent = `Measured ${todo.join(", ")} on ${[...state.measured.values()][0].measurement.device}; filled dots are measurements.`;
    await update();
  } catch (e) {
    status.textContent = `Measurement failed: ${e.field ? e.field + ": " : ""}${e.message}`;
  } finally {
    btn.disabled = false;
  }
}

// ---------- model ----------
async function loadModels() {
  const list = await api("/api/models");
  const sel = $("#model-source");
  for (const m of list) {
    const o = document.createElement("option");
    o.value = m.key;
    o.textContent = m.name;
    o.title = `${m.layers} layers, hidden ${m.hidden}`;
    sel.insertBefore(o, sel.lastElementChild);
  }
  sel.value = list.some((m) => m.key === "llama-3.1-8b") ? "llama-3.1-8b" : (list[0] ? list[0].key : "__paste");
  $("#config-json").hidden = sel.value !== "__paste";
}
async function runModel(ev) {
  if (ev) ev.preventDefault();
  const err = $("#model-error");
  const src = $("#model-source").value;
  const body = {
    phase: $("#phase").value,
    batch: Number($("#model-batch").value),
    seq: Number($("#seq").value),
    tp: Number($("#tp").value),
    weights: $("#weights").value,
    kv: $("#kv").value,
    fused: $("#fused").checked,
  };
  if (src === "__paste") {
    const text = $("#config-json").value.trim();
    if (!text) { showError(err, { field: "config", message: "paste a Hugging Face config.json" }); return; }
    try { body.config = JSON.parse(text); } catch (e) { showError(err, { field: "config", message: "not valid JSON: " + e.message }); return; }
  } else {
    body.model = src;
  }
  const btn = $("#model-run");
  btn.disabled = true;
  try {
    const rep = await api("/api/model?" + q({ hardware_key: hwKey() }), body);
    showError(err, null);
    renderModel(rep);
  } catch (e) {
    showError(err, e);
  } finally {
    btn.disabled = false;
  }
}
function renderModel(rep) {
  const t = rep.totals;
  const r = rep.request;
  const stats = [
    [fmtTime(t.time_us), `${r.phase} step time`],
    [t.tokens_per_s >= 1e5 ? si(t.tokens_per_s) : sig(t.tokens_per_s), "tokens / s"],
    t.ttft_ms !== null && t.ttft_ms !== undefined ? [sig(t.ttft_ms) + " ms", "time to first token"] : null,
    [sig(t.memory_per_gpu_gb) + " GB", `memory per GPU (of ${t.hardware_memory_gb === null ? "?" : sig(t.hardware_memory_gb)} GB)`, !t.fits],
    [si(t.params), "parameters"],
    [bytes(t.weight_bytes), `weights (${r.weights})`],
    [bytes(t.kv_bytes_at_seq), `KV cache at ${r.seq} tokens (${r.kv})`],
    [sig(t.flops / t.bytes) + " FLOP/B", "step arithmetic intensity"],
  ].filter(Boolean);
  $("#model-totals").innerHTML = `<div class="stat" style="grid-column:1/-1;background:none;border:none;padding:0"><b>${esc(rep.model)}</b> on ${esc(rep.hardware_name)} · ${esc(r.phase)}, batch ${r.batch}, context ${r.seq}, TP ${r.tp}${r.fused ? " · fused engine" : ""}${t.fits ? "" : ' · <span class="err-bad">does not fit in memory</span>'}</div>` +
    stats.map(([v, l, bad]) => `<div class="stat${bad ? " fit-no" : ""}"><div class="v">${esc(v)}</div><div class="l">${esc(l)}</div></div>`).join("");
  const total = rep.ops.reduce((s, o) => s + o.total_time_us, 0) || 1;
  $("#model-table tbody").innerHTML = rep.ops.map((o) => {
    const share = o.total_time_us / total;
    const p = o.prediction;
    const inside = o.fused_into ? ` <small class="subtle">in ${esc(o.fused_into)}</small>` : "";
    return `<tr><td class="scheme">${esc(o.name)}${inside}</td><td>${esc(o.group)}</td><td>${esc(o.kind)}</td><td class="num">${o.count}</td>
      <td class="num">${sig(p.arithmetic_intensity)}</td><td>${boundBadge(p.bound)}</td><td class="num">${fmtTime(p.time_us)}</td>
      <td class="num">${fmtTime(o.total_time_us)}</td>
      <td><div class="share"><div class="bar ${esc(p.bound)}" style="width:${(share * 100).toFixed(1)}%"></div><span class="pct">${(share * 100).toFixed(1)}%</span></div></td></tr>`;
  }).join("");
}

// ---------- NVML ----------
async function pollNvml() {
  const box = $("#nvml");
  try {
    const s = await api("/api/nvml/status");
    setGpu(true, "");
    $("#nvml-updated").textContent = "updated " + new Date(s.time_unix_ms).toLocaleTimeString();
    box.innerHTML = s.gpus.map(gpuCard).join("");
    clearTimeout(state.nvmlTimer);
    state.nvmlTimer = setTimeout(pollNvml, 2000);
  } catch (e) {
    clearTimeout(state.nvmlTimer);
    if (e.status === 503) {
      setGpu(false, e.message);
      box.innerHTML = `<div class="no-gpu"><div><b>No GPU: telemetry and measurements are unavailable on this machine.</b>Predictions, recommendations and model analysis work everywhere. <code>${esc(e.message)}</code></div></div>`;
      $("#nvml-updated").textContent = "";
      state.nvmlTimer = setTimeout(pollNvml, 30000); // a driver may appear; check now and then
    } else {
      box.innerHTML = `<div class="error">${esc(e.message)}</div>`;
      state.nvmlTimer = setTimeout(pollNvml, 5000);
    }
  }
}
function gpuCard(g) {
  const hist = state.powerHistory.get(g.index) || [];
  if (g.power_w !== null && g.power_w !== undefined) hist.push(g.power_w);
  while (hist.length > 60) hist.shift();
  state.powerHistory.set(g.index, hist);
  const max = Math.max(g.power_limit_w || 0, ...hist, 1);
  const spark = hist.length > 1 ? `<svg class="spark" viewBox="0 0 300 44" preserveAspectRatio="none"><polyline fill="none" stroke="#2454d6" stroke-width="2" points="${hist.map((v, i) => `${(i / 59) * 300},${42 - (v / max) * 40}`).join(" ")}"/></svg>` : "";
  const mhz = (c, m) => (c === null || c === undefined ? "–" : `${c}${m ? " / " + m : ""} MHz`);
  const metrics = [
    [g.power_w === null ? "–" : `${sig(g.power_w)} W`, `power${g.power_limit_w ? " (limit " + sig(g.power_limit_w) + " W)" : ""}`],
    [g.temperature_c === null ? "–" : `${g.temperature_c} °C`, "temperature"],
    [g.utilization_gpu_pct === null ? "–" : `${g.utilization_gpu_pct}%`, "utilization"],
    [mhz(g.sm_clock_mhz, g.sm_clock_max_mhz), "SM clock"],
    [mhz(g.mem_clock_mhz, g.mem_clock_max_mhz), "memory clock"],
    [g.memory_used_bytes === null ? "–" : `${bytes(g.memory_used_bytes)} / ${bytes(g.memory_total_bytes)}`, "memory used"],
  ];
  const thr = g.throttle_reasons && g.throttle_reasons.length ? `<div class="subtle">throttle: ${esc(g.throttle_reasons.join(", "))}</div>` : "";
  return `<div class="gpu-card"><h3>GPU ${g.index}: ${esc(g.name)}</h3><div class="metrics">${metrics.map(([v, l]) => `<div class="stat"><div class="v">${esc(v)}</div><div class="l">${esc(l)}</div></div>`).join("")}</div>${spark}${thr}</div>`;
}
function setGpu(available, reason) {
  state.gpu = { available, reason };
  const pill = $("#gpu-pill");
  pill.className = "pill " + (available ? "pill-good" : "pill-off");
  pill.textContent = available ? "GPU present" : "no GPU";
  pill.title = available ? "NVML answered: telemetry and measurements available" : reason;
  $("#measure-btn").hidden = !available;
}

// ---------- hardware ----------
function renderHwSummary() {
  const h = state.hardware.find((x) => x.key === hwKey());
  if (!h) return;
  const peaks = Object.entries(h.peak_tflops).filter(([c]) => c !== "FP64").map(([c, v]) => `${c} ${sig(v)}`).join(" · ");
  $("#hw-summary").innerHTML = `<span><b>${esc(h.name)}</b></span><span>bandwidth <b>${sig(h.memory_bandwidth_gb_s)} GB/s</b></span>` +
    (h.read_bandwidth_gb_s ? `<span title="read-only stream, measured: the roof of a decode GEMV">reads <b>${sig(h.read_bandwidth_gb_s)} GB/s</b></span>` : "") +
    (h.memory_gb ? `<span>memory <b>${sig(h.memory_gb)} GB</b></span>` : "") + `<span>dense peaks (TFLOP/s): ${esc(peaks)}</span><span>source: ${esc(h.source)}</span>`;
}
async function loadHardware() {
  state.hardware = await api("/api/hardware");
  const sel = $("#hardware");
  sel.innerHTML = state.hardware.map((h) => `<option value="${esc(h.key)}">${esc(h.name)} — ${esc(h.key)}</option>`).join("");
  // A profile the server was started with (`roofline serve --profile`, listed first) before the default preset.
  const servedKey = (state.hardware.find((h) => h.served) || {}).key;
  const want = new URLSearchParams(location.search).get("hardware_key") || servedKey || "h100-sxm";
  const found = state.hardware.find((h) => h.key === want || h.aliases.includes(want));
  sel.value = found ? found.key : state.hardware[0].key;
  renderHwSummary();
}

// ---------- start ----------
async function main() {
  for (const id of ["m", "n", "k", "batch"]) $("#" + id).addEventListener("input", () => scheduleUpdate());
  $("#gemm-form").addEventListener("submit", (e) => { e.preventDefault(); update(); });
  for (const b of $$(".chip-btn[data-shape]")) {
    b.addEventListener("click", () => {
      const [m, n, k] = b.dataset.shape.split(",");
      $("#m").value = m; $("#n").value = n; $("#k").value = k;
      update();
    });
  }
  $("#formats-native").addEventListener("click", () => {
    state.selected = new Set(state.formats.filter((f) => f.native && f.name !== "FP64").map((f) => f.name));
    renderChips(); update();
  });
  $("#formats-all").addEventListener("click", () => {
    state.selected = new Set(state.formats.filter((f) => f.name !== "FP64").map((f) => f.name).concat(WEIGHT_ONLY));
    renderChips(); update();
  });
  $("#hardware").addEventListener("change", async () => {
    renderHwSummary();
    await loadFormats();
    update();
    runModel();
  });
  $("#measure-btn").addEventListener("click", measureSelected);
  $("#model-form").addEventListener("submit", runModel);
  $("#model-source").addEventListener("change", () => { $("#config-json").hidden = $("#model-source").value !== "__paste"; });
  try {
    const health = await api("/healthz");
    $("#version").textContent = "server " + health.version;
    await loadHardware();
    await Promise.all([loadFormats(), loadModels()]);
  } catch (e) {
    showError($("#gemm-error"), e);
    return;
  }
  pollNvml();
  await Promise.all([update(), runModel()]);
}
main();
