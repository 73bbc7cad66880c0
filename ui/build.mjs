// Builds the console assets: dist/cards.js (the function-trigger renderers)
// and dist/page.js (the runtimes page), two ES modules whose default export is
// the console's setup(host), and dist/cards.css. React is the console's: the
// `react` import stays external. The one recipe for both `npm run build` and
// the root build.rs, which runs it with `--outdir=<cache>` and `--modules=<dir>`
// (the directory its cached `npm ci` ran in) so nothing is installed under ui/.
//
//   node build.mjs [--outdir=dist] [--modules=<dir holding node_modules>]

import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({
  options: {
    outdir: { type: "string", default: join(here, "dist") },
    modules: { type: "string", default: here },
  },
});
const require = createRequire(join(resolve(values.modules), "package.json"));
const esbuild = require("esbuild");
const outdir = resolve(values.outdir);

const banner = "/* sandbox-code-runner console cards: generated from ui/src by ui/build.mjs; do not edit. */";
const common = { bundle: true, minify: true, legalComments: "none", logLevel: "warning", banner: { js: banner, css: banner } };

const script = { ...common, format: "esm", target: ["es2020"], platform: "browser", external: ["react"] };

await esbuild.build({
  ...script,
  entryPoints: [join(here, "src/cards-setup.ts")],
  outfile: join(outdir, "cards.js"),
  banner: { js: banner },
});
await esbuild.build({
  ...script,
  entryPoints: [join(here, "src/page.ts")],
  outfile: join(outdir, "page.js"),
  banner: { js: "/* sandbox-code-runner console page: generated from ui/src by ui/build.mjs; do not edit. */" },
});
await esbuild.build({
  ...common,
  entryPoints: [join(here, "src/cards.css")],
  outfile: join(outdir, "cards.css"),
  banner: { css: banner },
});
