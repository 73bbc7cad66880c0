/**
 * The harness page in headless Debian Chromium, driven by playwright-core:
 * every fixture mounted through the registered renderers, a full-page
 * screenshot saved, and the DOM checked for full runtime ids.
 *
 * Env: SCR_UI_DIST (a directory holding cards.js and cards.css; default: a
 * fresh build of ui/src), SCR_UI_SCREENSHOT (default target/ui-screenshot.png).
 */
import { mkdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, expect, inject, it } from "vitest";
import type { Browser } from "playwright-core";
import { FULL_ID, assertNoLeak, loadFixtures } from "../test/fixtures";
import { REPO, useStage, watchedPage } from "./stage";

const SCREENSHOT = process.env.SCR_UI_SCREENSHOT ?? join(REPO, "target", "ui-screenshot.png");

const executable = inject("chromium");
const skipReason = inject("chromiumSkipReason");
const fixtures = loadFixtures();

describe.skipIf(!executable)(`harness page in Chromium${executable ? "" : ` (skipped: ${skipReason})`}`, () => {
  const stage = useStage(executable as string);

  async function open(options: Parameters<Browser["newPage"]>[0] = {}) {
    const { page, problems } = await watchedPage(stage.browser, options);
    page.on("requestfailed", (r) => problems.push(`requestfailed: ${r.url()}`));
    await page.goto(`${stage.url}/harness/index.html`);
    await page.waitForSelector('body[data-ready="true"]', { timeout: 30_000 });
    problems.push(...(await page.evaluate(() => (window as unknown as { __harnessErrors: string[] }).__harnessErrors)));
    return { page, problems };
  }

  it("renders every fixture as a styled card and saves a screenshot", async () => {
    const { page, problems } = await open();
    expect(problems).toEqual([]);
    const cards = page.locator("article.scr-card");
    expect(await cards.count()).toBe(fixtures.length);
    const look = await page.evaluate(() => {
      const card = document.querySelector("article.scr-card") as HTMLElement;
      const s = getComputedStyle(card);
      const heights = Array.from(document.querySelectorAll("article.scr-card"), (c) => c.getBoundingClientRect().height);
      return { radius: s.borderTopLeftRadius, font: s.fontSize, minHeight: Math.min(...heights), tokens: document.querySelectorAll("[class^=tok-]").length };
    });
    expect(look.radius).toBe("10px");
    expect(look.font).toBe("14px");
    expect(look.minHeight).toBeGreaterThan(60);
    expect(look.tokens).toBeGreaterThan(100);

    mkdirSync(dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    const png = readFileSync(SCREENSHOT);
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    expect(statSync(SCREENSHOT).size).toBeGreaterThan(50_000);
    console.log(`screenshot: ${SCREENSHOT}`);

    const dark = await open({ colorScheme: "dark" });
    await dark.page.screenshot({ path: SCREENSHOT.replace(/\.png$/, "-dark.png"), fullPage: true });
    await dark.page.close();
    await page.close();
  });

  it("holds no full runtime id in the DOM text or markup, before and after interaction", async () => {
    const { page } = await open();
    const check = async (when: string) => {
      const { text, html } = await page.evaluate(() => ({ text: document.body.innerText, html: document.documentElement.outerHTML }));
      expect(text.length).toBeGreaterThan(2_000);
      assertNoLeak(text, fixtures, `DOM text ${when}`);
      assertNoLeak(html, fixtures, `DOM markup ${when}`);
    };
    await check("on load");

    // Every raw pane opened: still nothing.
    for (const tab of await page.locator('.scr-tab[data-view="raw"]').all()) await tab.click();
    expect(await page.locator(".scr-raw:visible").count()).toBe(fixtures.length);
    await check("with every raw pane open");

    // The chip hands the full value to the clipboard on a click, and only then.
    expect(await page.evaluate(() => (window as unknown as { __copied: string[] }).__copied)).toEqual([]);
    for (const tab of await page.locator('.scr-tab[data-view="card"]').all()) await tab.click();
    const keep = page.locator('[data-fixture="run-node-keep"] .scr-chip');
    // The "copied" state lasts a moment; record it rather than race it.
    await page.evaluate(() => {
      const chip = document.querySelector('[data-fixture="run-node-keep"] .scr-chip') as Element;
      const seen: string[] = [];
      (window as unknown as { __chipStates: string[] }).__chipStates = seen;
      new MutationObserver(() => seen.push(chip.textContent ?? "")).observe(chip, { subtree: true, characterData: true, childList: true, attributes: true });
    });
    await keep.click();
    await expect.poll(() => page.evaluate(() => (window as unknown as { __copied: string[] }).__copied)).toHaveLength(1);
    const [copied] = await page.evaluate(() => (window as unknown as { __copied: string[] }).__copied);
    const want = (fixtures.find((f) => f.name === "run-node-keep")?.output as { runtime_id: string }).runtime_id;
    expect(copied).toBe(want);
    expect(copied).toMatch(FULL_ID);
    await expect.poll(() => page.evaluate(() => (window as unknown as { __chipStates: string[] }).__chipStates.some((t) => t.includes("copied")))).toBe(true);
    await check("after copying");
    await page.close();
  });

  it("honours prefers-reduced-motion", async () => {
    const moving = await open();
    expect(await moving.page.evaluate(() => getComputedStyle(document.querySelector(".scr-card") as Element).animationName)).toBe("scr-enter");
    await moving.page.close();
    const still = await open({ reducedMotion: "reduce" });
    const names = await still.page.evaluate(() => {
      const card = getComputedStyle(document.querySelector(".scr-card") as Element);
      const chip = getComputedStyle(document.querySelector(".scr-chip") as Element);
      return { animation: card.animationName, transition: chip.transitionDuration };
    });
    expect(names).toEqual({ animation: "none", transition: "0s" });
    await still.page.close();
  });
});
