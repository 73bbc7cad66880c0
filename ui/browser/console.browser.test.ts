/**
 * The built assets in headless Debian Chromium, through the console-host
 * stand-in (harness/): each script loaded with `import()` of its URL and
 * its default `setup(host)` run; one renderer per operation registered and
 * dispatched before the console's own families and the JSON fallback; every
 * fixture rendered as the console would show it, with no full runtime id in
 * the card, the raw-JSON pane or what its copy buttons copy; `redactRaw`
 * applied only to claimed calls and failing closed; disposal on reload and
 * delete; and a screenshot of each kind of call.
 *
 * Env: SCR_UI_DIST (built assets; default a fresh build), SCR_UI_SCREENSHOT_DIR.
 */
import { describe, expect, inject, it } from "vitest";
import type { Page } from "playwright-core";
import { FULL_ID, assertNoLeak, fixture, loadFixtures, toMessage } from "../test/fixtures";
import { openConsole, screenshot, useStage, type AssetRef, type ConsoleApi } from "./stage";

const executable = inject("chromium");
const skipReason = inject("chromiumSkipReason");
const fixtures = loadFixtures();
const OPS = ["run", "register_function", "teardown", "list_runtimes"];
const KEPT_ID = (fixture("run-node-keep").output as { runtime_id: string }).runtime_id;

/** Runs `f` in the tab on the stand-in's `window.__console`, with `arg` (no closure reaches the tab). */
const host = (page: Page) => ({
  call: <T, A = undefined>(f: (c: ConsoleApi, arg: A) => T | Promise<T>, arg?: A) =>
    page.evaluate(({ src, arg }) => (0, eval)(`(${src})`)((window as unknown as { __console: ConsoleApi }).__console, arg), { src: f.toString(), arg }) as Promise<T>,
});

async function show(page: Page, messages: unknown[]): Promise<void> {
  await page.evaluate((m) => (window as unknown as { __console: ConsoleApi }).__console.show(m), messages);
  await page.waitForFunction((n) => document.querySelectorAll(".ft").length === n, messages.length);
}

describe.skipIf(!executable)(`the console-host stand-in in Chromium${executable ? "" : ` (skipped: ${skipReason})`}`, () => {
  const stage = useStage(executable as string);

  it("imports each built script: its default export is a function, and its setup registers through host", async () => {
    const { page, problems, assets } = await openConsole(stage);
    const scripts = assets.filter((a) => a.kind === "script");
    expect(scripts.map((a) => a.path).sort()).toEqual(["sandbox-code-runner/cards.js", "sandbox-code-runner/page.js"]);
    // As the console's loader does: import() of `ui/<path>?v=<hash>` (a string, so vitest leaves the import() alone).
    const importDefault = `async (list) => Promise.all(list.map(async (a) => typeof (await import(new URL("ui/" + a.path + "?v=" + a.hash, document.baseURI).href)).default))`;
    const kinds = await page.evaluate(({ src, list }) => (0, eval)(src)(list), { src: importDefault, list: scripts });
    expect(kinds).toEqual(["function", "function"]);
    const state = await host(page).call((c) => ({ loaded: c.loaded().map((a) => a.path).sort(), errors: c.loadErrors, renderers: c.renderers(), pages: c.pages() }));
    expect(state.errors).toEqual([]);
    expect(state.loaded).toEqual(["sandbox-code-runner/cards.css", "sandbox-code-runner/cards.js", "sandbox-code-runner/page.js"]);
    expect(state.renderers).toEqual(OPS.map((op) => ({ id: `sandbox-code-runner/cards.js#${op}`, scope: "sandbox-code-runner", path: "sandbox-code-runner/cards.js", redactRaw: true })));
    expect(state.pages).toEqual([{ id: "sandbox-code-runner-runtimes", title: "Sandbox runtimes", configurationId: "sandbox-code-runner", scope: "sandbox-code-runner", path: "sandbox-code-runner/page.js" }]);
    // No globals: what the old classic script wrote is nowhere.
    expect(await page.evaluate(() => ["__iiiConsoleUi", "SandboxCodeRunnerUI"].filter((k) => k in window))).toEqual([]);
    expect(problems).toEqual([]);
    await page.close();
  });

  it("refuses a classic script without a default setup(), as the console does", async () => {
    const { page, problems } = await openConsole(stage);
    await host(page).call((c) => c.set({ path: "probe/legacy-cards.js", kind: "script", hash: "1" }));
    const errors = await host(page).call((c) => c.loadErrors);
    expect(errors).toEqual(["[iii-ui] failed to load probe/legacy-cards.js@1: no default setup() export"]);
    expect(problems).toEqual([`console: ${errors[0]}`]);
    expect((await host(page).call((c) => c.renderers())).every((r) => r.path === "sandbox-code-runner/cards.js")).toBe(true);
    await page.close();
  });

  it("renders every fixture through its renderer, in chat and trace shapes, with no full id in the DOM", async () => {
    const { page, problems } = await openConsole(stage);
    const messages = fixtures.flatMap((f) => [toMessage(f, "chat"), toMessage(f, "trace")]);
    await show(page, messages);
    const cards = await page.evaluate(() =>
      Array.from(document.querySelectorAll<HTMLElement>(".ft"), (el) => ({
        id: el.dataset.messageId,
        by: el.dataset.renderedBy,
        status: el.dataset.functionStatus,
        scoped: !!el.querySelector('[data-iii-ui="sandbox-code-runner"] > div[data-iii-ui="sandbox-code-runner"] > article.scr-card'),
      })),
    );
    expect(cards).toHaveLength(messages.length);
    for (const [i, c] of cards.entries()) {
      const f = fixtures[Math.floor(i / 2)] as (typeof fixtures)[number];
      expect(c, f.name).toMatchObject({ by: "renderer", scoped: true, status: f.error !== undefined ? "error" : f.output === undefined ? "running" : "done" });
    }
    const { text, html } = await page.evaluate(() => ({ text: document.body.innerText, html: document.documentElement.outerHTML }));
    assertNoLeak(text, fixtures, "DOM text");
    assertNoLeak(html, fixtures, "DOM markup");
    const look = await page.evaluate(() => {
      const card = document.querySelector("article.scr-card") as HTMLElement;
      const s = getComputedStyle(card);
      return { radius: s.borderTopLeftRadius, font: s.fontSize, tokens: document.querySelectorAll("[class^=tok-]").length };
    });
    expect(look).toMatchObject({ radius: "10px", font: "14px" });
    expect(look.tokens).toBeGreaterThan(100);
    // Every raw-JSON tab open: no id by shape anywhere (redactRaw sees the
    // request and the response apart, so a non-UUID secret of the request is
    // masked in the request pane only; see ui/README.md).
    for (const tab of await page.getByRole("tab", { name: "raw json" }).all()) await tab.click();
    expect(await page.locator('[data-function-pane="request"] pre').count()).toBe(messages.filter((m) => !m.running).length);
    const raw = await page.evaluate(() => document.documentElement.outerHTML);
    expect(raw).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i);
    for (const text of await page.locator('[data-function-pane="request"] pre').allInnerTexts()) expect(text).not.toContain("handmade-secret");
    expect(problems).toEqual([]);
    await page.close();
  });

  it("keeps a kept run's runtime_id out of the raw-JSON pane and its copies; the chip copies it on a click", async () => {
    const { page, problems } = await openConsole(stage, { options: { permissions: ["clipboard-read", "clipboard-write"] } });
    const clipboard = () => page.evaluate(() => navigator.clipboard.readText());
    const m = toMessage(fixture("run-node-keep"));
    await show(page, [m]);
    const card = page.locator(`.ft[data-message-id="${m.id}"]`);
    await screenshot(card, "run-kept");
    await card.getByRole("tab", { name: "raw json" }).click();
    const raw = await card.locator('[data-function-pane="response"] pre').innerText();
    expect(raw).toContain('"runtime_id": "rt-10f3…"');
    expect(raw).not.toContain(KEPT_ID);
    await screenshot(card, "run-kept-raw-json");
    await card.getByRole("button", { name: "copy request" }).click();
    await card.getByRole("button", { name: "copy response" }).click();
    const copied = await host(page).call((c) => c.copied);
    expect(copied).toHaveLength(2);
    for (const t of copied) expect(t).not.toMatch(FULL_ID);
    expect(await clipboard()).toBe(copied[1]);
    // The chat answer is the harness envelope: its details and its text, both redacted.
    expect(JSON.parse(copied[1] as string).details).toMatchObject({ runtime_id: "rt-10f3…", stdout: "saved\n" });
    await card.getByRole("tab", { name: "terminal" }).click();
    // The chip is the card's own: it writes the full id to the clipboard on this click, and only then.
    // The "copied" state lasts a moment; record it rather than race it.
    await card.locator(".scr-chip").evaluate((chip) => {
      const seen: string[] = [];
      (window as unknown as { __chipStates: string[] }).__chipStates = seen;
      new MutationObserver(() => seen.push(chip.textContent ?? "")).observe(chip, { subtree: true, characterData: true, childList: true });
    });
    await card.locator(".scr-chip").click();
    await expect.poll(clipboard).toBe(KEPT_ID);
    await expect.poll(() => page.evaluate(() => (window as unknown as { __chipStates: string[] }).__chipStates.some((t) => t.endsWith("copied")))).toBe(true);
    expect(await page.evaluate(() => document.documentElement.outerHTML)).not.toContain(KEPT_ID);
    expect(problems).toEqual([]);
    await page.close();
  });

  it("shows a running streamed run's output live, polled through host.iii.trigger while the call is in flight", async () => {
    const { page, problems } = await openConsole(stage, { options: { viewport: { width: 900, height: 900 } } });
    const f = fixture("run-streaming");
    const ref = (f.input as { output: { access_key: string } }).output;
    const out = (seq: number, data: string) => ({ seq, type: "stdout" as const, data });
    await host(page).call((c, script) => c.setWatchScript(script), {
      batches: [[out(0, "step 0: loading shard 0\n"), out(1, "step 1: loading shard 1\n")], [{ seq: 2, type: "stderr" as const, data: "warning: shard 1 took 2.4 s\n" }], [out(3, "step 2: loading shard 2\n")], [out(4, "step 3: loading shard 3\n")]],
      ends: false,
    });
    const m = toMessage(f);
    expect(m.running).toBe(true);
    await show(page, [m]);
    const card = page.locator(`.ft[data-message-id="${m.id}"]`);
    // The frames arrive over several polls; the call is in flight all along.
    await expect.poll(() => card.locator(".scr-live").innerText(), { timeout: 15_000 }).toContain("step 3: loading shard 3");
    expect(await card.getAttribute("data-function-status")).toBe("running");
    const blocks = await card.locator(".scr-live figure.scr-term").evaluateAll((figs) => figs.map((fig) => [fig.querySelector("figcaption")?.textContent, fig.querySelector("pre")?.textContent]));
    expect(blocks).toEqual([
      ["stdout", "step 0: loading shard 0\nstep 1: loading shard 1"],
      ["stderr", "warning: shard 1 took 2.4 s"],
      ["stdout", "step 2: loading shard 2\nstep 3: loading shard 3"],
    ]);
    const calls = await host(page).call((c) => c.calls.filter((x) => x.functionId === "sandbox-code-runner::watch").map((x) => x.payload));
    expect(calls[0]).toEqual({ output: ref });
    expect(calls.length).toBeGreaterThanOrEqual(4);
    expect(calls.slice(1).every((p) => typeof p.after === "number")).toBe(true);
    // The writer ref's key is nowhere: not in the card, not in the raw panes.
    expect(await page.evaluate(() => document.documentElement.outerHTML)).not.toContain(ref.access_key);
    await screenshot(card, "run-live-output");
    expect(problems).toEqual([]);
    await page.close();
  });

  it("applies redactRaw only to the calls its renderer claims, and fails closed when it throws", async () => {
    const { page } = await openConsole(stage);
    await host(page).call((c) => c.set({ path: "probe/host-checks.js", kind: "script", hash: "1" }));
    const echo = { id: "echo", role: "function-trigger", functionId: "demo::echo", input: { note: KEPT_ID }, output: { ok: true }, createdAt: 0 };
    const boom = { id: "boom", role: "function-trigger", functionId: "probe::boom", input: { secret: "hunter2" }, output: { secret: "hunter2" }, createdAt: 0 };
    const crash = { id: "crash", role: "function-trigger", functionId: "probe::crash", input: {}, output: {}, createdAt: 0 };
    const unknown = { id: "unknown", role: "function-trigger", functionId: "other::thing", input: { runtime_id: KEPT_ID }, output: {}, createdAt: 0 };
    await show(page, [echo, boom, crash, unknown]);
    // Not ours: the console's own family renders it, and no redactor touches its raw pane.
    expect(await page.locator('.ft[data-message-id="echo"] .fp-echo').count()).toBe(1);
    await page.locator('.ft[data-message-id="echo"]').getByRole("tab", { name: "raw json" }).click();
    expect(await page.locator('.ft[data-message-id="echo"] [data-function-pane="request"] pre').innerText()).toContain(KEPT_ID);
    expect(await page.locator('.ft[data-message-id="unknown"]').getAttribute("data-rendered-by")).toBe("json");
    const boomPanes = await page.locator('.ft[data-message-id="boom"] pre').allInnerTexts();
    expect(boomPanes).toEqual(["[not shown: this call's redactRaw failed]", "[not shown: this call's redactRaw failed]"]);
    expect(await page.locator('.ft[data-message-id="crash"] [data-ext-error]').innerText()).toBe("extension crashed · probe/host-checks.js");
    await page.close();
  });

  it("disposes a script on reload and on delete: no duplicate renderer, its teardown run, its calls back to JSON", async () => {
    const { page, assets } = await openConsole(stage);
    const cards = assets.find((a) => a.path === "sandbox-code-runner/cards.js") as AssetRef;
    await show(page, [toMessage(fixture("run-node-keep"))]);
    await host(page).call((c) => c.set({ path: "sandbox-code-runner/cards.js", kind: "script", hash: "reloaded" }));
    expect((await host(page).call((c) => c.renderers())).map((r) => r.id)).toEqual(OPS.map((op) => `sandbox-code-runner/cards.js#${op}`));
    expect(await page.locator(".ft article.scr-card").count()).toBe(1);
    await host(page).call((c) => c.sync([]));
    expect(await host(page).call((c) => ({ renderers: c.renderers(), pages: c.pages(), loaded: c.loaded() }))).toEqual({ renderers: [], pages: [], loaded: [] });
    // Without the renderers the JSON fallback shows the call verbatim: what
    // a console without the cards shows (the id included: redactRaw is theirs).
    await expect.poll(() => page.locator(".ft").getAttribute("data-rendered-by")).toBe("json");
    expect(await page.locator(".ft").innerText()).toContain(KEPT_ID);
    expect(await page.locator('link[data-iii-ui-asset]').count()).toBe(0);
    await host(page).call((c, a) => c.set({ ...a, hash: "again" }), cards);
    await expect.poll(() => page.locator(".ft").getAttribute("data-rendered-by")).toBe("renderer");
    await page.close();
  });

  it("without the shared React each script says why and registers nothing", async () => {
    const { page } = await openConsole(stage, { query: "?react=absent" });
    const state = await host(page).call((c) => ({ errors: c.loadErrors, renderers: c.renderers(), pages: c.pages() }));
    expect(state.renderers).toEqual([]);
    expect(state.pages).toEqual([]);
    for (const asset of ["cards.js", "page.js"]) {
      expect(state.errors.some((e) => e.startsWith(`[iii-ui] failed to load sandbox-code-runner/${asset}@`) && e.includes(`[sandbox-code-runner] ${asset}: the console's shared React is missing`))).toBe(true);
    }
    await page.close();
  });

  it("honours prefers-reduced-motion", async () => {
    const moving = await openConsole(stage);
    await show(moving.page, [toMessage(fixture("run-node-keep"))]);
    expect(await moving.page.evaluate(() => getComputedStyle(document.querySelector(".scr-card") as Element).animationName)).toBe("scr-enter");
    await moving.page.close();
    const still = await openConsole(stage, { options: { reducedMotion: "reduce" } });
    await show(still.page, [toMessage(fixture("run-node-keep"))]);
    const names = await still.page.evaluate(() => ({
      animation: getComputedStyle(document.querySelector(".scr-card") as Element).animationName,
      transition: getComputedStyle(document.querySelector(".scr-chip") as Element).transitionDuration,
    }));
    expect(names).toEqual({ animation: "none", transition: "0s" });
    await still.page.close();
  });

  it("follows the console's theme over the system's", async () => {
    const background = (page: Page) => page.evaluate(() => getComputedStyle(document.querySelector(".scr-card") as Element).backgroundColor);
    const { page } = await openConsole(stage, { options: { colorScheme: "dark" } });
    await show(page, [toMessage(fixture("run-node-keep"))]);
    expect(await background(page)).toBe("rgb(255, 255, 255)"); // the console says light
    await page.evaluate(() => document.documentElement.removeAttribute("data-theme"));
    expect(await background(page)).toBe("rgb(21, 27, 35)"); // it says nothing: the system's dark
    await page.evaluate(() => (document.documentElement.dataset.theme = "dark"));
    await page.emulateMedia({ colorScheme: "light" });
    expect(await background(page)).toBe("rgb(21, 27, 35)"); // it says dark
    await page.close();
  });

  it("saves a screenshot of each kind of call", async () => {
    const { page, problems } = await openConsole(stage, { options: { viewport: { width: 900, height: 900 } } });
    const shots: [string, string][] = [
      ["run-oneshot", "run-node-ok"],
      ["run-failing-script", "run-python-exception"],
      ["run-infrastructure-error", "run-expired-quotes-id"],
      ["run-in-flight", "run-pending"],
      ["register-function", "register-python"],
      ["teardown-runtime", "teardown-runtime"],
      ["teardown-namespace", "teardown-namespace"],
    ];
    const now = Date.UTC(2026, 11, 1, 12);
    const entry = (i: number, namespace?: string) => ({
      handle: `h-${(0x9e3779b97f4a7c15n * BigInt(i + 1)).toString(16).slice(-16)}`, kind: namespace ? "namespace" : "kept", lang: i % 2 ? "python" : "node", namespace,
      functions: namespace ? [`${namespace}f${i}`] : [], created_at_ms: now - 600_000, last_used_at_ms: now - 1_000 * (i + 3), idle_ttl_secs: 900, reap_at_ms: now + 300_000, executions: i + 1, exec_ms: 12.5, vm: "alive",
    });
    const inventory = {
      generated_at_ms: now, vm_check: "ok", totals: {}, pool: { node: { ready: 1, warming: 0, target: 1 }, python: { ready: 0, warming: 1, target: 1 } },
      runtimes: [entry(0, "billing::"), entry(1, "billing::"), entry(2, "etl::"), ...Array.from({ length: 11 }, (_, i) => entry(3 + i))],
    };
    const list = { id: "list-runtimes-chat", role: "function-trigger", functionId: "sandbox-code-runner::list_runtimes", input: {}, output: inventory, durationMs: 3, createdAt: now };
    await show(page, [...shots.map(([, f]) => toMessage(fixture(f))), list]);
    for (const [name, f] of [...shots, ["list-runtimes", "list-runtimes"]] as const) await screenshot(page.locator(`.ft[data-message-id="${f}-chat"]`), name);
    expect(problems).toEqual([]);
    await page.close();
  });
});
