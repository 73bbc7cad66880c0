/**
 * What the browser tests stand on: the UI's assets (SCR_UI_DIST, else a
 * fresh build of ui/src) served by the console-host stand-in on loopback,
 * one headless Chromium, tabs of the stand-in console with the worker's
 * assets loaded the way a console loads them, pages that collect their own
 * errors, and where screenshots go.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll } from "vitest";
import { chromium, type Browser, type Locator, type Page } from "playwright-core";
import { startServer } from "../harness/serve.mjs";

export const UI = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const REPO = resolve(UI, "..");
/** Where screenshots go: SCR_UI_SCREENSHOT_DIR (docs/screenshots to refresh the committed ones), else target/ui-screenshots. */
export const SCREENSHOT_DIR = resolve(process.env.SCR_UI_SCREENSHOT_DIR ?? join(REPO, "target", "ui-screenshots"));
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

/** What the stand-in's `window.__console` offers a test (harness/host/main.ts). */
export interface ConsoleApi {
  sync(assets: AssetRef[]): Promise<void>;
  set(asset: AssetRef): Promise<void>;
  remove(path: string): Promise<void>;
  loaded(): AssetRef[];
  loadErrors: string[];
  renderers(): { id: string; scope: string; path: string; redactRaw: boolean }[];
  pages(): { id: string; title: string; configurationId: string | null; scope: string; path: string }[];
  show(messages: unknown[]): void;
  stylesSettled(): Promise<void>;
  copied: string[];
  calls: { functionId: string; payload: Record<string, unknown> }[];
  setInventory(inv: unknown): void;
  setWatchScript(script: { batches: { seq: number; type: "stdout" | "stderr"; data: string }[][]; ends: boolean }): void;
}

export interface AssetRef {
  path: string;
  kind: "script" | "style";
  hash: string;
}

/**
 * A tab of the stand-in console (`query`: e.g. `?react=absent`) with the
 * worker's assets, as the stand-in advertises them, synced: styles, then
 * scripts imported and set up. Uncaught errors and console errors land in
 * `problems`.
 */
export async function openConsole(
  stage: Stage,
  { query = "", options = {}, assets }: { query?: string; options?: Parameters<Browser["newPage"]>[0]; assets?: AssetRef[] } = {},
): Promise<{ page: Page; problems: string[]; assets: AssetRef[] }> {
  const { page, problems } = await watchedPage(stage.browser, options);
  page.on("requestfailed", (r) => problems.push(`requestfailed: ${r.url()}`));
  await page.goto(`${stage.url}/console.html${query}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 30_000 });
  const listed = assets ?? ((await (await fetch(`${stage.url}/assets.json`)).json()) as AssetRef[]);
  await page.evaluate(async (a) => {
    const c = (window as unknown as { __console: ConsoleApi }).__console;
    await c.sync(a);
    await c.stylesSettled();
  }, listed);
  return { page, problems, assets: listed };
}

/** Saves a PNG of `locator` under SCREENSHOT_DIR; returns its path. Kept small: one element, 1x. */
export async function screenshot(locator: Locator, name: string): Promise<string> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const path = join(SCREENSHOT_DIR, `${name}.png`);
  await locator.screenshot({ path, animations: "disabled" });
  const size = statSync(path).size;
  if (size < 2_000 || size > 400_000) throw new Error(`${path}: ${size} bytes, not a plausible card screenshot`);
  console.log(`screenshot: ${path}`);
  return path;
}
