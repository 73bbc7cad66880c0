// Serves the console-host stand-in on 127.0.0.1: the page a console tab would
// be, the worker's UI assets where a console serves them, and the /vendor
// shims over the tab's shared React, as the console that implements
// injectable UI does (see harness/host/loader.ts for what is reproduced).
//
//   node harness/serve.mjs [--port=4178] [--dist=<dir with cards.js, cards.css, page.js>]
//
// /                       console.html (the tab)       /host.js  harness/host/*.ts, bundled with React
// /ui/sandbox-code-runner/<file>   the built assets (the worker's console:script / console:style paths)
// /ui/probe/<file>        harness/probes: assets that exercise the host (a classic script, a throwing redactRaw)
// /assets.json            the worker's assets as the console advertises them: [{path, kind, hash}]
// /vendor/<name>.js       ESM shims re-exporting window.__III_CONSOLE__ (react, react-dom, react/jsx-runtime, console-ui)
// /fixtures/…             fixtures/ui, and /fixtures/index.json the fixture names
// The browser tests import startServer() and serve on a free port.

import { createHash } from "node:crypto";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { readFile, readdir } from "node:fs/promises";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
export const UI_DIR = resolve(here, "..");
export const FIXTURES_DIR = resolve(here, "../../fixtures/ui");
const require = createRequire(join(UI_DIR, "package.json"));

/** The worker's assets: path → [file in dist, kind]. */
export const WORKER_ASSETS = [
  ["sandbox-code-runner/cards.css", "cards.css", "style"],
  ["sandbox-code-runner/cards.js", "cards.js", "script"],
  ["sandbox-code-runner/page.js", "page.js", "script"],
];

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
};

const IDENT = /^[A-Za-z_$][\w$]*$/;

/** A shim re-exporting `window.__III_CONSOLE__[key]`, its named exports listed from the real module. */
function shim(key, mod) {
  const names = Object.keys(mod).filter((k) => k !== "default" && IDENT.test(k));
  return [
    `const C = window.__III_CONSOLE__;`,
    `if (!C || !C.${key}) throw new Error("window.__III_CONSOLE__.${key} is not set");`,
    `const M = C.${key};`,
    `export default M;`,
    names.length ? `export const { ${names.join(", ")} } = M;` : "",
  ].join("\n");
}

async function vendor() {
  return {
    "react.js": shim("React", require("react")),
    "react-dom.js": shim("ReactDOM", require("react-dom")),
    "react-jsx-runtime.js": shim("JsxRuntime", require("react/jsx-runtime")),
    "console-ui.js": `const C = window.__III_CONSOLE__;\nexport const api = C && C.api;\nexport default api;\n`,
  };
}

async function bundleHost() {
  const esbuild = require("esbuild");
  const out = await esbuild.build({
    entryPoints: [join(here, "host/main.ts")],
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    target: ["es2020"],
    logLevel: "warning",
    define: { "process.env.NODE_ENV": '"development"' },
  });
  return out.outputFiles[0].text;
}

function inside(root, rel) {
  const p = normalize(join(root, rel));
  return p === root || p.startsWith(root + sep) ? p : null;
}

function hashOf(bytes) {
  return createHash("sha256").update(bytes).digest("hex").slice(0, 16);
}

/** Starts the server; resolves to { url, close }. */
export async function startServer({ port = 0, dist = join(UI_DIR, "dist") } = {}) {
  const distDir = resolve(dist);
  const [hostJs, shims] = await Promise.all([bundleHost(), vendor()]);
  const send = (res, type, body) => res.writeHead(200, { "content-type": type, "cache-control": "no-store" }).end(body);
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
      if (path === "/" || path === "/console.html") return send(res, TYPES[".html"], await readFile(join(here, "console.html")));
      if (path === "/host.js") return send(res, TYPES[".js"], hostJs);
      if (path.startsWith("/vendor/") && shims[path.slice(8)]) return send(res, TYPES[".js"], shims[path.slice(8)]);
      if (path === "/assets.json") {
        const assets = [];
        for (const [assetPath, file, kind] of WORKER_ASSETS) assets.push({ path: assetPath, kind, hash: hashOf(await readFile(join(distDir, file))) });
        return send(res, TYPES[".json"], JSON.stringify(assets));
      }
      if (path === "/fixtures/index.json") {
        const names = (await readdir(FIXTURES_DIR)).filter((f) => f.endsWith(".json")).map((f) => f.slice(0, -5)).sort();
        return send(res, TYPES[".json"], JSON.stringify(names));
      }
      let file = null;
      if (path.startsWith("/ui/sandbox-code-runner/")) file = inside(distDir, path.slice("/ui/sandbox-code-runner/".length));
      else if (path.startsWith("/ui/probe/")) file = inside(join(here, "probes"), path.slice("/ui/probe/".length));
      else if (path.startsWith("/fixtures/")) file = inside(FIXTURES_DIR, path.slice("/fixtures/".length));
      if (!file) {
        res.writeHead(404).end("not found");
        return;
      }
      send(res, TYPES[extname(file)] ?? "application/octet-stream", await readFile(file));
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
  console.log(`console-host stand-in: ${url}/`);
}
