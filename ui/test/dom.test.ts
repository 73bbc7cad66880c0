// @vitest-environment happy-dom
/**
 * The cards as live DOM (happy-dom): every fixture mounted, no full id in
 * the text, the markup or an attribute; the runtime chip hands the full id to
 * the clipboard on an explicit click and only then; unmounting removes the card.
 */
import { describe, expect, it, vi } from "vitest";
import { invocationOf } from "../src/message";
import { cardOf, mountCard, type Card } from "../src/render";
import { assertNoLeak, fixture, loadFixtures, toMessage, type Fixture } from "./fixtures";

function host(): HTMLElement {
  const el = document.createElement("div");
  document.body.appendChild(el);
  return el;
}

function cardFor(f: Fixture): Card {
  const inv = invocationOf(toMessage(f));
  const card = inv ? cardOf(inv) : null;
  if (!card) throw new Error(`${f.name}: no card`);
  return card;
}

describe("mounted cards (happy-dom)", () => {
  it("mount every fixture: no full id in the DOM's text, markup or attributes", () => {
    document.body.replaceChildren();
    for (const f of loadFixtures()) mountCard(host(), cardFor(f), { copy: async () => {} });
    expect(document.querySelectorAll("article.scr-card").length).toBe(loadFixtures().length);
    assertNoLeak(document.body.textContent ?? "", loadFixtures(), "DOM text");
    assertNoLeak(document.body.innerHTML, loadFixtures(), "DOM markup");
  });

  it("copies the full runtime id on an explicit click only", async () => {
    const f = fixture("run-node-keep");
    const id = (f.output as { runtime_id: string }).runtime_id;
    const copied: string[] = [];
    const el = host();
    mountCard(el, cardFor(f), { copy: async (t) => void copied.push(t), reducedMotion: true });
    expect(copied).toEqual([]);
    const chip = el.querySelector<HTMLButtonElement>(".scr-chip");
    expect(chip?.textContent).toContain(`${id.slice(0, 7)}…`);
    chip?.click();
    await vi.waitFor(() => expect(copied).toEqual([id]));
    expect(chip?.classList.contains("is-copied")).toBe(true);
    expect(el.innerHTML).not.toContain(id);
  });

  it("says so on the chip when the clipboard refuses", async () => {
    const el = host();
    mountCard(el, cardFor(fixture("teardown-runtime")), { copy: async () => Promise.reject(new Error("denied")), reducedMotion: true });
    const chip = el.querySelector<HTMLButtonElement>(".scr-chip");
    chip?.click();
    await vi.waitFor(() => expect(chip?.textContent).toContain("copy failed"));
  });

  it("unmounts to an empty host", () => {
    const el = host();
    const unmount = mountCard(el, cardFor(fixture("teardown-namespace")));
    expect(el.textContent).toContain("my-app::double");
    unmount();
    expect(el.children.length).toBe(0);
  });
});
