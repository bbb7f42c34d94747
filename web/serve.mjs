// A static file server for the built page (dist/) and models (a second root, under /models/),
// bound to 127.0.0.1. Under /slow/ the models come at 8 MB/s, and `server.sent` records how many
// bytes each /slow/ response sent before it ended (for the tests of early refusal).
// The page needs nothing else: any static host serving dist/ with these types works (docs/web.md).
// Options (tests/bench/browser-cpu.mjs): `roots` maps more URL prefixes to folders (wllama's
// files), `isolate` sends the cross-origin isolation headers that wasm threads need, `cors` lets
// any origin read the files (a stand-in for a public model host such as Hugging Face).
// Usage: node serve.mjs DIST MODELS PORT
import { createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, normalize } from "node:path";

const [dist, models, port = "8080"] = process.argv.slice(2);
const types = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".css": "text/css", ".gguf": "application/octet-stream" };

export function serve(distDir, modelDir, listenPort, { roots = {}, isolate = false, cors = false } = {}) {
  const sent = {};
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const slow = path.startsWith("/slow/");
    const extra = Object.keys(roots).find((prefix) => path.startsWith(prefix));
    const [root, rel] = extra ? [roots[extra], path.slice(extra.length)] : path.startsWith("/models/") ? [modelDir, path.slice(8)] : slow ? [modelDir, path.slice(6)] : [distDir, path === "/" ? "index.html" : path.slice(1)];
    const file = normalize(join(root, rel));
    if (!file.startsWith(normalize(root))) { res.writeHead(403).end(); return; }
    let size;
    try { size = statSync(file).size; } catch { res.writeHead(404).end("not found"); return; }
    const isolation = isolate ? { "cross-origin-opener-policy": "same-origin", "cross-origin-embedder-policy": "require-corp" } : {};
    const open = cors ? { "access-control-allow-origin": "*" } : {};
    res.writeHead(200, { "content-type": types[extname(file)] || "application/octet-stream", "content-length": size, ...isolation, ...open });
    if (req.method === "HEAD") { res.end(); return; }
    if (!slow) { createReadStream(file).pipe(res); return; }
    // 1 MiB every 125 ms, stopping when the client goes away.
    const stream = createReadStream(file, { highWaterMark: 1 << 20 });
    let bytes = 0;
    let closed = false;
    res.on("close", () => { closed = true; sent[rel] = bytes; stream.destroy(); });
    stream.on("data", (chunk) => {
      stream.pause();
      res.write(chunk, () => { bytes += chunk.length; setTimeout(() => { if (!closed) stream.resume(); }, 125); });
    });
    stream.on("end", () => res.end());
  });
  server.sent = sent;
  return new Promise((resolve) => server.listen(Number(listenPort), "127.0.0.1", () => resolve(server)));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await serve(dist, models, port);
  console.log(`serving http://127.0.0.1:${port}/`);
}
