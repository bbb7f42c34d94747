// One measured race on SmolLM2-135M (not part of CI: minutes on a software GPU).
// Usage: node race135.mjs DIST MODELS OUT_PNG [max_tokens] [draft]
import { chromium } from "playwright-core";
import { serve } from "../../web/serve.mjs";

const [dist, models, png, maxTokens = "16", draft = "ngram"] = process.argv.slice(2);
const port = 19000 + Math.floor(Math.random() * 1000);
const server = await serve(dist, models, port);
const prompt = "Copy this list exactly: red, green, blue, yellow, red, green, blue, yellow, red, green,";
const q = new URLSearchParams({ model: "models/SmolLM2-135M-Instruct.Q4_1.gguf", draft, prompt, chat: "0", "max-tokens": maxTokens, autorun: "1" });
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
  args: ["--no-sandbox", "--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-webgpu-adapter=swiftshader"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const t0 = Date.now();
await page.goto(`http://127.0.0.1:${port}/?${q}`);
for (const pane of ["target", "strict", "mars"]) await page.waitForSelector(`[data-pane="${pane}"][data-done="true"]`, { timeout: 1_800_000 });
for (const pane of ["target", "strict", "mars"]) {
  const stat = async (s) => page.textContent(`[data-pane="${pane}"] [data-stat="${s}"]`);
  console.log(`${pane}: ${await stat("tokens_per_second")} tok/s, ${pane === "target" ? "" : `${await stat("speedup")}, τ ${await stat("tau")}, `} ${await stat("tokens")} tokens: ${JSON.stringify(await page.textContent(`[data-pane="${pane}"] .output`))}`);
}
console.log(`wall ${((Date.now() - t0) / 1000).toFixed(0)} s`);
await page.screenshot({ path: png, fullPage: true });
await browser.close();
server.close();
