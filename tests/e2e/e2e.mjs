// End-to-end tests of the page in headless Debian Chromium with real WebGPU (SwiftShader):
//   node e2e.mjs DIST MODELS MARS_BIN OUT_DIR
// DIST: the trunk build; MODELS: a folder with tiny.gguf (and optionally the 135M model);
// MARS_BIN: the native CLI (for the cross-platform check); OUT_DIR: screenshots.
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { serve } from "./serve.mjs";

const [dist, models, marsBin, outDir] = process.argv.slice(2);
mkdirSync(outDir, { recursive: true });
const WEBGPU = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-webgpu-adapter=swiftshader"];
const BASE = ["--no-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"];
const port = 18000 + Math.floor(Math.random() * 1000);
const server = await serve(dist, models, port);
const url = (q) => `http://127.0.0.1:${port}/?${new URLSearchParams(q)}`;
let failures = 0;

async function withPage(flags, fn) {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true, args: [...BASE, ...flags] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (m) => { if (m.type() === "error") console.log("  [console]", m.text()); });
  try { await fn(page); } finally { await browser.close(); }
}

async function test(name, fn) {
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

// Both panes' figures as numbers (asserting each is one), printed so the log carries them.
async function paneStats(page, label) {
  const out = {};
  for (const pane of ["strict", "mars"]) {
    out[pane] = {};
    for (const stat of ["tokens_per_second", "tau", "relaxed", "tokens"]) {
      const text = await page.textContent(`[data-pane="${pane}"] [data-stat="${stat}"]`);
      assert(Number.isFinite(Number(text)), `${pane} ${stat} = ${text}`);
      out[pane][stat] = Number(text);
    }
  }
  const line = (p) => `${p}: ${out[p].tokens_per_second} tok/s, τ ${out[p].tau}, relaxed ${out[p].relaxed}, ${out[p].tokens} tokens`;
  console.log(`  ${label}: ${line("strict")}; ${line("mars")}`);
  return out;
}

const TINY_PROMPT = "the cat sat on the mat; the cat";
await test("race on the tiny model: both panes finish, numbers, strict equals native greedy", async () => {
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "layers:first:1", prompt: TINY_PROMPT, chat: "0", "max-tokens": "12", autorun: "1" }));
    await page.waitForSelector('[data-pane="strict"][data-done="true"]', { timeout: 240_000 });
    await page.waitForSelector('[data-pane="mars"][data-done="true"]', { timeout: 240_000 });
    await paneStats(page, "tiny race");
    // Users can pick hub models without typing: both URL fields offer them.
    const offered = await page.$$eval("#model-urls option", (os) => os.map((o) => o.value));
    assert(offered.filter((u) => /^https:\/\/huggingface\.co\/[^/]+\/[^/]+\/resolve\/main\/[^/]+\.gguf$/.test(u)).length >= 2, `offered ${offered}`);
    assert(await page.getAttribute("#draft-url", "list") === "model-urls", "draft URL field offers no models");
    const strict = await page.textContent('[data-pane="strict"] .output');
    const native = JSON.parse(execFileSync(marsBin, ["generate", "--model", join(models, "tiny.gguf"), "--prompt", TINY_PROMPT, "--max-tokens", "12", "--json", "--kernels", "f32"]).toString());
    assert(strict === native.text, `strict ${JSON.stringify(strict)} != native ${JSON.stringify(native.text)}`);
    await page.screenshot({ path: join(outDir, "race-tiny.png"), fullPage: true });
  });
});

await test("a separate draft model file races too and strict stays lossless", async () => {
  // The tiny model's first layer, written out by the CLI as its own GGUF.
  execFileSync(marsBin, ["extract-layers", "--model", join(models, "tiny.gguf"), "--layers", "first:1", "--out", join(models, "tiny-draft.gguf")]);
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "model", draft_model: "models/tiny-draft.gguf", prompt: TINY_PROMPT, chat: "0", "max-tokens": "12", autorun: "1" }));
    await page.waitForSelector('[data-pane="mars"][data-done="true"]', { timeout: 240_000 });
    await page.waitForSelector('[data-pane="strict"][data-done="true"]', { timeout: 240_000 });
    const strict = await page.textContent('[data-pane="strict"] .output');
    const native = JSON.parse(execFileSync(marsBin, ["generate", "--model", join(models, "tiny.gguf"), "--prompt", TINY_PROMPT, "--max-tokens", "12", "--json", "--kernels", "f32"]).toString());
    assert(strict === native.text, `strict ${JSON.stringify(strict)} != native ${JSON.stringify(native.text)}`);
  });
});

await test("device lost mid-run shows the error, keeps the text, and Reload recovers", async () => {
  await withPage(WEBGPU, async (page) => {
    await page.goto(url({ model: "models/tiny.gguf", draft: "layers:first:1", prompt: TINY_PROMPT, chat: "0", "max-tokens": "400", autorun: "1" }));
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

await test("Chromium without WebGPU flags shows the no-WebGPU message", async () => {
  await withPage([], async (page) => {
    await page.goto(url({ model: "models/tiny.gguf" }));
    await page.waitForFunction(() => document.querySelector("#status").classList.contains("error"), null, { timeout: 60_000 });
    const text = await page.textContent("#status");
    assert(/WebGPU/.test(text), text);
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
    await page.waitForSelector('[data-pane="strict"][data-done="true"]', { timeout: 240_000 });
    // Same browser profile, the model server now unreachable for the model file.
    let requests = 0;
    await page.route("**/models/**", (route) => { requests++; return route.abort(); });
    await page.goto(url(q));
    await page.waitForSelector('[data-pane="strict"][data-done="true"]', { timeout: 240_000 });
    assert(requests === 0, `${requests} model request(s) on the second visit`);
    const text = await page.textContent('[data-pane="strict"] .output');
    assert(text.length > 0, "no text on the second visit");
  });
});

const big = join(models, "SmolLM2-135M-Instruct.Q4_1.gguf");
if (existsSync(big)) {
  await test("the 135M model loads from the local server and produces its first tokens", async () => {
    await withPage(WEBGPU, async (page) => {
      await page.goto(url({ model: "models/SmolLM2-135M-Instruct.Q4_1.gguf", draft: "ngram", prompt: "Hi", "max-tokens": "2", autorun: "1" }));
      await page.waitForSelector('[data-pane="strict"][data-done="true"]', { timeout: 540_000 });
      await page.waitForSelector('[data-pane="mars"][data-done="true"]', { timeout: 120_000 });
      const text = await page.textContent('[data-pane="strict"] .output');
      assert(text.length > 0, "no text");
      const stats = await paneStats(page, "135M race");
      assert(stats.strict.tokens > 0 && stats.mars.tokens > 0, "a pane produced no tokens");
      await page.screenshot({ path: join(outDir, "race-135m.png"), fullPage: true });
    });
  });
}

server.close();
console.log(failures ? `${failures} e2e test(s) failed` : "all e2e tests passed");
process.exit(failures ? 1 : 0);
