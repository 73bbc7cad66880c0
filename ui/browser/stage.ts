/**
 * What the browser tests stand on: the UI's assets (SCR_UI_DIST, else a
 * fresh build of ui/src) served from loopback, one headless Chromium, and
 * pages that collect their own errors.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll } from "vitest";
import { chromium, type Browser, type Page } from "playwright-core";
import { startServer } from "../harness/serve.mjs";

export const UI = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const REPO = resolve(UI, "..");
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** The served assets' base URL and the browser; set once `beforeAll` ran. */
export interface Stage {
  url: string;
  browser: Browser;
}

/**
 * Registers the enclosing suite's `beforeAll`/`afterAll`: build (unless
 * SCR_UI_DIST names built assets), serve, launch Chromium; then close all
 * and remove the build.
 */
export function useStage(executable: string): Stage {
  const stage = {} as Stage;
  let server: { url: string; close(): Promise<void> } | undefined;
  let scratch: string | null = null;
  beforeAll(async () => {
    let dist = process.env.SCR_UI_DIST;
    if (!dist) {
      scratch = mkdtempSync(join(tmpdir(), "scr-ui-dist-"));
      execFileSync(process.execPath, [join(UI, "build.mjs"), `--outdir=${scratch}`], { stdio: "inherit" });
      dist = scratch;
    }
    server = await startServer({ dist });
    stage.url = server.url;
    stage.browser = await chromium.launch({ executablePath: executable, args: FLAGS, timeout: 60_000 });
  });
  afterAll(async () => {
    await stage.browser?.close();
    await server?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });
  return stage;
}

/** A new 1440×900 page whose uncaught errors and console errors land in `problems`. */
export async function watchedPage(
  browser: Browser,
  options: Parameters<Browser["newPage"]>[0] = {},
): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, colorScheme: "light", ...options });
  const problems: string[] = [];
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console: ${m.text()}`);
  });
  return { page, problems };
}
