// A static file server for the built page (dist/) and models (a second root, under /models/),
// bound to 127.0.0.1. Usage: node serve.mjs DIST MODELS PORT
import { createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, normalize } from "node:path";

const [dist, models, port = "8080"] = process.argv.slice(2);
const types = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".css": "text/css", ".gguf": "application/octet-stream" };

export function serve(distDir, modelDir, listenPort) {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const [root, rel] = path.startsWith("/models/") ? [modelDir, path.slice(8)] : [distDir, path === "/" ? "index.html" : path.slice(1)];
    const file = normalize(join(root, rel));
    if (!file.startsWith(normalize(root))) { res.writeHead(403).end(); return; }
    let size;
    try { size = statSync(file).size; } catch { res.writeHead(404).end("not found"); return; }
    res.writeHead(200, { "content-type": types[extname(file)] || "application/octet-stream", "content-length": size });
    createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(Number(listenPort), "127.0.0.1", () => resolve(server)));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await serve(dist, models, port);
  console.log(`serving http://127.0.0.1:${port}/`);
}
