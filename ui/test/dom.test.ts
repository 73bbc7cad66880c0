// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { entries, mount, renderCard } from "../src/index";
import { assertNoLeak, fixture, loadFixtures } from "./fixtures";

function host(): HTMLElement {
  const el = document.createElement("div");
  document.body.appendChild(el);
  return el;
}

describe("mounted cards (happy-dom)", () => {
  it("mount every fixture: no full id in the DOM's text, markup or attributes", () => {
    document.body.replaceChildren();
    for (const f of loadFixtures()) mount(host(), f, { copy: async () => {} });
    expect(document.querySelectorAll("article.scr-card").length).toBe(loadFixtures().length);
    assertNoLeak(document.body.textContent ?? "", loadFixtures(), "DOM text");
    assertNoLeak(document.body.innerHTML, loadFixtures(), "DOM markup");
  });

  it("copies the full runtime id on an explicit click only", async () => {
    const f = fixture("run-node-keep");
    const id = (f.output as { runtime_id: string }).runtime_id;
    const copied: string[] = [];
    const el = host();
    mount(el, f, { copy: async (t) => void copied.push(t), reducedMotion: true });
    expect(copied).toEqual([]);
    const chip = el.querySelector<HTMLButtonElement>(".scr-chip");
    expect(chip?.textContent).toContain(`${id.slice(0, 7)}…`);
    chip?.click();
    await Promise.resolve();
    await Promise.resolve();
    expect(copied).toEqual([id]);
    expect(chip?.classList.contains("is-copied")).toBe(true);
    expect(el.innerHTML).not.toContain(id);
  });

  it("copy JSON copies the redacted call", async () => {
    const f = fixture("run-reuse-leaky");
    const copied: string[] = [];
    const el = host();
    mount(el, f, { copy: async (t) => void copied.push(t) });
    el.querySelector<HTMLButtonElement>(".scr-copy")?.click();
    await Promise.resolve();
    expect(copied.length).toBe(1);
    assertNoLeak(copied[0] as string, f, "copied JSON");
    expect(JSON.parse(copied[0] as string)).toMatchObject({ function_id: "sandbox-code-runner::run" });
  });

  it("switches between the card and the raw pane", () => {
    const el = host();
    mount(el, fixture("teardown-namespace"));
    const [card, raw] = Array.from(el.querySelectorAll<HTMLElement>(".scr-pane"));
    expect(card?.hidden).toBe(false);
    expect(raw?.hidden).toBe(true);
    el.querySelector<HTMLButtonElement>('.scr-tab[data-view="raw"]')?.click();
    expect(card?.hidden).toBe(true);
    expect(raw?.hidden).toBe(false);
    expect(el.querySelector(".scr-card")?.getAttribute("data-view")).toBe("raw");
    expect(raw?.textContent).toContain('"unregistered"');
    el.querySelector<HTMLButtonElement>('.scr-tab[data-view="card"]')?.click();
    expect(card?.hidden).toBe(false);
  });

  it("registered entries mount and unmount", () => {
    const el = host();
    const entry = entries().find((e) => e.function_id.endsWith("::teardown"));
    const unmount = entry?.mount(el, { input: { namespace: "x" }, output: { namespace: "x::", torn_down: true, unregistered: ["x::a", "x::b"] } });
    expect(el.textContent).toContain("x::a");
    expect(el.textContent).toContain("2 functions unregistered");
    unmount?.();
    expect(el.children.length).toBe(0);
  });

  it("renderCard survives junk", () => {
    for (const v of [null, 3, { function_id: "sandbox-code-runner::run", output: "??" }]) {
      expect(renderCard(v, document).tagName).toBe("ARTICLE");
    }
  });
});
