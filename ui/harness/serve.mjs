// Serves the harness page, the built assets and the fixtures on 127.0.0.1.
//
//   node harness/serve.mjs [--port=4178] [--dist=<dir with cards.js, cards.css>]
//
// /harness/…  ui/harness      /dist/…  the built assets (default ui/dist)
// /fixtures/… fixtures/ui     /fixtures/index.json  the fixture names
// The browser test imports startServer() and serves on a free port.

import { createServer } from "node:http";
import { readFile, readdir } from "node:fs/promises";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
export const UI_DIR = resolve(here, "..");
export const FIXTURES_DIR = resolve(here, "../../fixtures/ui");

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
};

function inside(root, rel) {
  const p = normalize(join(root, rel));
  return p === root || p.startsWith(root + sep) ? p : null;
}

/** Starts the server; resolves to { url, close }. */
export function startServer({ port = 0, dist = join(UI_DIR, "dist") } = {}) {
  const roots = { harness: here, dist: resolve(dist), fixtures: FIXTURES_DIR };
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
      if (path === "/" || path === "/harness" || path === "/harness/") {
        res.writeHead(302, { location: "/harness/index.html" }).end();
        return;
      }
      if (path === "/fixtures/index.json") {
        const names = (await readdir(FIXTURES_DIR)).filter((f) => f.endsWith(".json")).map((f) => f.slice(0, -5)).sort();
        res.writeHead(200, { "content-type": TYPES[".json"], "cache-control": "no-store" }).end(JSON.stringify(names));
        return;
      }
      const [, top, ...rest] = path.split("/");
      const root = roots[top];
      const file = root ? inside(root, rest.join("/")) : null;
      if (!file) {
        res.writeHead(404).end("not found");
        return;
      }
      const body = await readFile(file);
      res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" }).end(body);
    } catch {
      res.writeHead(404).end("not found");
    }
  });
  return new Promise((ok, fail) => {
    server.once("error", fail);
    server.listen(port, "127.0.0.1", () => {
      const { port: bound } = server.address();
      ok({ url: `http://127.0.0.1:${bound}`, close: () => new Promise((done) => server.close(() => done())) });
    });
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { port: { type: "string", default: "4178" }, dist: { type: "string" } } });
  const { url } = await startServer({ port: Number(values.port), dist: values.dist ?? join(UI_DIR, "dist") });
  console.log(`harness: ${url}/harness/index.html`);
}
