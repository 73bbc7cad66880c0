/**
 * The built script assets as the console's loader takes them: each one
 * loaded with `import()` of its URL must have a default export that is a
 * function (its `setup(host)`), and importing it must write no global. The
 * assets are SCR_UI_DIST's (the ones embedded in the worker, when cargo runs
 * this) or a fresh build of ui/src.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const UI = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SCRIPTS = ["cards.js", "page.js"];

let scratch: string | null = null;
function dist(): string {
  if (process.env.SCR_UI_DIST) return process.env.SCR_UI_DIST;
  if (!scratch) {
    scratch = mkdtempSync(join(tmpdir(), "scr-ui-assets-"));
    execFileSync(process.execPath, [join(UI, "build.mjs"), `--outdir=${scratch}`], { stdio: "inherit" });
  }
  return scratch;
}
afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

/** What the console's loader checks of a module; the error text is the loader's. */
async function loadSetup(url: string): Promise<(host: unknown) => unknown> {
  const mod = (await import(/* @vite-ignore */ url)) as { default?: unknown };
  if (typeof mod.default !== "function") throw new Error("no default setup() export");
  return mod.default as (host: unknown) => unknown;
}

describe("each built script asset, loaded with import()", () => {
  for (const name of SCRIPTS) {
    it(`${name}: its default export is a function, and importing it writes no global`, async () => {
      const before = new Set(Object.getOwnPropertyNames(globalThis));
      const setup = await loadSetup(`${pathToFileURL(join(dist(), name)).href}?v=${Date.now()}`);
      expect(typeof setup).toBe("function");
      expect(Object.getOwnPropertyNames(globalThis).filter((k) => !before.has(k))).toEqual([]);
      expect(readFileSync(join(dist(), name), "utf8")).not.toMatch(/__iiiConsoleUi|SandboxCodeRunnerUI/);
    });
  }

  it("the check refuses a classic script (the old cards.js shape)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "scr-ui-legacy-"));
    try {
      const legacy = join(dir, "cards.js");
      writeFileSync(legacy, "(() => { globalThis.__scrLegacyProbe = [1]; })();\n");
      await expect(loadSetup(pathToFileURL(legacy).href)).rejects.toThrow("no default setup() export");
    } finally {
      delete (globalThis as { __scrLegacyProbe?: unknown }).__scrLegacyProbe;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
