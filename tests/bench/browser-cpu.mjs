// The page's wasm CPU path beside wllama (llama.cpp in WebAssembly) in the same headless
// Chromium, same GGUF files, same prompt, greedy, alternating rounds (see browser-cpu.sh).
// BACKEND=webgpu: the page on the machine's WebGPU adapter instead, Chromium started with
// WebGPU on (a real GPU: tests/bench/gpu.sh), wllama with every layer offered to its WebGPU
// path (it runs on the CPU where it declines the adapter, and says so in its log).
// Usage: node browser-cpu.mjs DIST MODELS WLLAMA_ESM ROUNDS TOKENS RESULTS.json [MODEL…] [--race]
// Prints one line per measurement and writes every measurement's values to RESULTS.json
// (browser-cpu.sh prints their medians with tests/bench/rounds.py).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
// The e2e suite's pinned playwright-core (tests/e2e/package.json).
import { chromium } from "../e2e/node_modules/playwright-core/index.mjs";
import { serve } from "../../web/serve.mjs";

const args = process.argv.slice(2);
const race = args.includes("--race");
const [dist, models, wllamaEsm, rounds, tokens, resultsFile, ...files] = args.filter((a) => a !== "--race");
const PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring and a short example.";
const page = mkdtempSync(join(tmpdir(), "mars-bench-"));
writeFileSync(join(page, "blank.html"), "<!doctype html><title>wllama</title>");
const port = 20000 + Math.floor(Math.random() * 1000);
const server = await serve(dist, models, port, { roots: { "/wllama/": wllamaEsm, "/bench/": page }, isolate: true });
const base = `http://127.0.0.1:${port}`;
// Default: no WebGPU flags, so the page takes its CPU path as a visitor without a GPU gets it.
const backend = process.env.BACKEND || "cpu";
const gpuFlags = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--ignore-gpu-blocklist"];
const launch = () => chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage", ...(backend === "webgpu" ? gpuFlags : [])] });

async function mars(file, query) {
  const browser = await launch();
  try {
    const p = await browser.newPage();
    const q = new URLSearchParams({ model: `models/${file}`, backend, prompt: PROMPT, chat: "1", "max-tokens": tokens, autorun: "1", draft: "ngram", ...query });
    await p.goto(`${base}/?${q}`);
    const panes = ["target", "strict", "mars"];
    for (const pane of panes) await p.waitForSelector(`[data-pane="${pane}"][data-done="true"]`, { timeout: 3_600_000 });
    const out = {};
    for (const pane of panes) {
      const stat = async (s) => Number(await p.getAttribute(`[data-pane="${pane}"] [data-stat="${s}"]`, "data-value"));
      out[pane] = { tps: await stat("tokens_per_second"), tokens: await stat("tokens"), tau: pane === "target" ? null : await stat("tau") };
    }
    out.status = await p.textContent("#status");
    out.wasm = Number(await p.getAttribute("body", "data-wasm-bytes"));
    return out;
  } finally { await browser.close(); }
}

async function wllama(file, threads) {
  const browser = await launch();
  try {
    const p = await browser.newPage();
    await p.goto(`${base}/bench/blank.html`);
    return await p.evaluate(async ({ file, threads, prompt, tokens, gpu }) => {
      const { Wllama } = await import("/wllama/index.js");
      const w = new Wllama({ default: "/wllama/wasm/wllama.wasm" }, { logger: { debug() {}, log() {}, warn() {}, error: console.error } });
      const blob = await (await fetch(`/models/${file}`)).blob();
      await w.loadModel([blob], { n_ctx: 1024, n_threads: threads, n_gpu_layers: gpu ? 99 : 0 });
      const r = await w.createChatCompletion({ messages: [{ role: "user", content: prompt }], max_tokens: tokens, temperature: 0, top_k: 1 });
      const t = r.timings;
      await w.exit();
      return { tps: t.predicted_per_second, tokens: t.predicted_n, prompt_tps: t.prompt_per_second, isolated: self.crossOriginIsolated };
    }, { file, threads, prompt: PROMPT, tokens: Number(tokens), gpu: backend === "webgpu" });
  } finally { await browser.close(); }
}

const results = {};
const record = (key, v) => { (results[key] ||= []).push(v); console.log(`${key}: ${v.toFixed(2)} tok/s`); };
for (let round = 0; round < Number(rounds); round++) {
  for (const file of files) {
    const m = await mars(file, {});
    record(`${file} mars ${backend === "cpu" ? "cpu (1 thread)" : backend} plain`, m.target.tps);
    console.log(`  ${m.target.tokens} tokens; ${m.status.split("\n")[0]}`);
    for (const threads of [1, 2]) {
      const w = await wllama(file, threads);
      record(`${file} wllama ${backend === "webgpu" ? "webgpu, " : ""}${threads} thread${threads > 1 ? "s" : ""} plain`, w.tps);
      console.log(`  ${w.tokens} tokens; prompt ${w.prompt_tps.toFixed(1)} tok/s; cross-origin isolated ${w.isolated}`);
    }
  }
  if (race) {
    // The pair preset's settings (k, draft vocabulary) with its draft model named explicitly:
    // a URL's drafter overrides the preset's.
    const r = await mars("Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf", { preset: "qwen-coder", draft: "model", draft_model: "models/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf" });
    for (const pane of ["target", "strict", "mars"]) {
      record(`pair race mars ${backend} ${pane}`, r[pane].tps);
      if (r[pane].tau) console.log(`  τ ${r[pane].tau.toFixed(2)}, ${r[pane].tokens} tokens`);
    }
    console.log(`  peak wasm ${(r.wasm / 2 ** 20).toFixed(0)} MiB`);
  }
}
writeFileSync(resultsFile, JSON.stringify(results));
server.close();
