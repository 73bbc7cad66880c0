/**
 * The runtimes page in headless Debian Chromium, registered by page.js's
 * setup(host) in the console-host stand-in and opened at its route: an
 * inventory of about 50 runtimes in 5 namespaces (the one a live worker
 * answered when SCR_UI_INVENTORY names it, else a synthetic one), the
 * configuration action the console adds for its configurationId, a
 * screenshot, no runtime id in the DOM, a namespace torn down from the page,
 * and 1,000 runtimes rendered a page at a time with one list_runtimes call
 * per refresh.
 *
 * Env: SCR_UI_DIST (built assets; default a fresh build), SCR_UI_INVENTORY
 * (a list_runtimes answer as JSON), SCR_UI_SCREENSHOT_DIR.
 */
import { readFileSync } from "node:fs";
import { describe, expect, inject, it } from "vitest";
import { GROUPS_PER_PAGE, ROWS_PER_PAGE, type Inventory, type RuntimeEntry } from "../src/page";
import type { Page } from "playwright-core";
import { FULL_ID } from "../test/fixtures";
import { openConsole, screenshot, useStage, type ConsoleApi } from "./stage";

const executable = inject("chromium");
const skipReason = inject("chromiumSkipReason");

/** `kept` kept runtimes plus one per (namespace, lang). */
export function synthetic(namespaces: number, kept: number): Inventory {
  const now = Date.UTC(2026, 11, 1, 12, 0, 0);
  const runtimes: RuntimeEntry[] = [];
  let n = 0;
  const entry = (kind: "kept" | "namespace", lang: string, namespace?: string, functions: string[] = []): RuntimeEntry => {
    n += 1;
    const last = now - ((n * 7919) % 600_000);
    const e: RuntimeEntry = {
      handle: `h-${(0x9e3779b97f4a7c15n * BigInt(n)).toString(16).slice(-16).padStart(16, "0")}`,
      kind, lang, namespace, functions,
      created_at_ms: last - 60_000 * (n % 50),
      last_used_at_ms: last,
      idle_ttl_secs: 900,
      reap_at_ms: last + 900_000,
      executions: (n * 13) % 97,
      exec_ms: ((n * 37) % 1000) + 0.5,
      vm: n % 23 === 0 ? "gone" : "alive",
    };
    runtimes.push(e);
    return e;
  };
  for (let i = 0; i < namespaces; i++) {
    const ns = `team-${String(i).padStart(3, "0")}::`;
    for (const lang of ["python", "node"]) entry("namespace", lang, ns, [`team-${String(i).padStart(3, "0")}::${lang}_a`, `team-${String(i).padStart(3, "0")}::${lang}_b`]);
  }
  for (let i = 0; i < kept; i++) entry("kept", i % 3 ? "python" : "node");
  return { generated_at_ms: now, runtimes: runtimes, vm_check: "ok", pool: { node: { ready: 1, warming: 0, target: 1 }, python: { ready: 0, warming: 1, target: 1 } }, totals: { run: { ops: 120, sandbox_calls: 260, bytes_planted: 0, worker_added_us_mean: 410.2 }, register_function: { ops: 10, sandbox_calls: 30, bytes_planted: 2048, worker_added_us_mean: 820 }, teardown: { ops: 3, sandbox_calls: 3, bytes_planted: 0, worker_added_us_mean: 95 } } };
}

function inventory(): Inventory {
  const path = process.env.SCR_UI_INVENTORY;
  return path ? (JSON.parse(readFileSync(path, "utf8")) as Inventory) : synthetic(5, 40);
}

describe.skipIf(!executable)(`runtimes page in Chromium${executable ? "" : ` (skipped: ${skipReason})`}`, () => {
  const stage = useStage(executable as string);

  /** The stand-in console with the worker's assets, `inv` as the inventory, at the page's route. */
  async function open(inv: Inventory) {
    const { page, problems } = await openConsole(stage, { options: { viewport: { width: 1280, height: 900 } } });
    await page.evaluate((i) => (window as unknown as { __console: ConsoleApi }).__console.setInventory(i), inv);
    await page.locator('nav a[href="#/ext/sandbox-code-runner-runtimes"]').click();
    await page.waitForSelector('[data-page-id="sandbox-code-runner-runtimes"] .scr-pg[data-loading="false"] [data-role="summary"]', { timeout: 30_000 });
    return { page, problems };
  }

  const calls = (page: Page) => page.evaluate(() => (window as unknown as { __console: ConsoleApi }).__console.calls);

  it("shows runtimes grouped by namespace, the pool and totals, under the configuration action; saves a screenshot", async () => {
    const inv = inventory();
    const { page, problems } = await open(inv);
    expect(problems).toEqual([]);
    const namespaces = new Set(inv.runtimes.filter((r) => r.kind === "namespace").map((r) => r.namespace));
    const summary = await page.locator('[data-role="summary"]').innerText();
    expect(summary).toContain(`${inv.runtimes.length} live runtimes`);
    expect(summary).toContain(`${namespaces.size} namespaces`);
    for (const ns of namespaces) expect(await page.locator(`section[data-namespace="${ns}"]`).count()).toBe(1);
    expect(await page.locator("section.scr-pg-group").count()).toBe(namespaces.size + 1);
    expect(await page.locator("text=Warm pool").count()).toBe(1);
    expect(await page.locator("text=Totals since start").count()).toBe(1);
    const radius = await page.evaluate(() => getComputedStyle(document.querySelector(".scr-pg-group") as Element).borderTopLeftRadius);
    expect(radius).toBe("10px");
    const { text, html } = await page.evaluate(() => ({ text: document.body.innerText, html: document.documentElement.outerHTML }));
    expect(text).not.toMatch(FULL_ID);
    expect(html).not.toMatch(FULL_ID);
    expect((await calls(page)).filter((c) => c.functionId === "sandbox-code-runner::list_runtimes")).toHaveLength(1);
    // The console's header carries the configuration action the page declared.
    expect(await page.locator('.page-head button[data-configuration-id="sandbox-code-runner"]').count()).toBe(1);
    await screenshot(page.locator('[data-page-id="sandbox-code-runner-runtimes"]'), "runtimes-page");
    await page.close();
  });

  it("tears a namespace down from the page after a confirming second click", async () => {
    const inv = inventory();
    const ns = inv.runtimes.find((r) => r.kind === "namespace")?.namespace as string;
    const { page } = await open(inv);
    const btn = page.locator(`button[data-teardown="${ns}"]`);
    await btn.click();
    expect((await calls(page)).some((c) => c.functionId === "sandbox-code-runner::teardown")).toBe(false);
    await page.locator(`button[data-teardown="${ns}"]`).click();
    await expect.poll(async () => page.locator(`section[data-namespace="${ns}"]`).count()).toBe(0);
    const made = await calls(page);
    expect(made.filter((c) => c.functionId === "sandbox-code-runner::teardown")).toEqual([{ functionId: "sandbox-code-runner::teardown", payload: { namespace: ns } }]);
    expect(made.filter((c) => c.functionId === "sandbox-code-runner::list_runtimes")).toHaveLength(2);
    expect(await page.locator('[role="status"]').innerText()).toContain(`Tore down ${ns}`);
    await page.close();
  });

  it("stays usable at 1,000 runtimes: a page of groups and rows at a time, one call per refresh", async () => {
    const big = synthetic(30, 940);
    expect(big.runtimes.length).toBe(1000);
    const started = Date.now();
    const { page, problems } = await open(big);
    expect(problems).toEqual([]);
    const rows = await page.locator("tbody tr[data-handle]").count();
    expect(rows).toBeLessThanOrEqual(GROUPS_PER_PAGE * ROWS_PER_PAGE);
    expect(rows).toBeGreaterThan(0);
    await page.locator('nav[aria-label="namespace pages"] button[aria-label="next namespace"]').first().click();
    expect(await page.locator("section.scr-pg-group h3").first().innerText()).toBe(`team-${String(GROUPS_PER_PAGE).padStart(3, "0")}::`);
    await page.getByRole("button", { name: "Refresh", exact: true }).click();
    await expect.poll(async () => (await calls(page)).length).toBe(2);
    expect((await calls(page)).every((c) => c.functionId === "sandbox-code-runner::list_runtimes")).toBe(true);
    // Rendering and paging 1,000 runtimes stays interactive.
    expect(Date.now() - started).toBeLessThan(15_000);
    await page.close();
  });
});
