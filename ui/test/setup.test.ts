// @vitest-environment happy-dom
/**
 * Both scripts' `setup(host)` against a minimal host and real React 19 (the
 * console's version): cards.js registers one renderer per operation, each
 * claiming only its id, rendering through React or falling through, and
 * unregisters them all on teardown; page.js registers the runtimes page with
 * the worker's configuration entry; and both fail loudly without React.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { FunctionTriggerRenderer, Host, PageRegistration } from "../src/console";
import { fixture, toMessage } from "./fixtures";

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

interface Recorded {
  host: Host;
  renderers: FunctionTriggerRenderer[];
  pages: PageRegistration[];
  unregistered: string[];
  calls: string[];
}

function fakeHost(path: string): Recorded {
  const rec: Recorded = { renderers: [], pages: [], unregistered: [], calls: [], host: undefined as unknown as Host };
  rec.host = {
    path,
    iii: {
      async trigger(functionId: string) {
        rec.calls.push(functionId);
        return { generated_at_ms: 0, runtimes: [], vm_check: "ok", pool: {}, totals: {} };
      },
    },
    functionTriggers: {
      register(r) {
        rec.renderers.push(r);
        return () => void rec.unregistered.push(r.id);
      },
    },
    pages: {
      register(p) {
        rec.pages.push(p);
        return () => void rec.unregistered.push(p.id);
      },
    },
  };
  return rec;
}

async function render(node: unknown): Promise<{ el: HTMLElement; unmount(): Promise<void> }> {
  const React = await import("react");
  const { createRoot } = await import("react-dom/client");
  const el = document.createElement("div");
  document.body.appendChild(el);
  const root = createRoot(el);
  await React.act(async () => root.render(node));
  return { el, unmount: () => React.act(async () => root.unmount()) };
}

afterEach(() => {
  vi.doUnmock("react");
  vi.resetModules();
  vi.restoreAllMocks();
});

describe("cards.js setup(host)", () => {
  it("registers one renderer per operation, each claiming exactly its id, and unregisters them all", async () => {
    const { default: setup } = await import("../src/cards-setup");
    const rec = fakeHost("sandbox-code-runner/cards.js");
    const teardown = await setup(rec.host);
    const ops = ["run", "register_function", "teardown", "list_runtimes"];
    expect(rec.renderers.map((r) => r.id)).toEqual(ops.map((op) => `sandbox-code-runner/cards.js#${op}`));
    for (const [i, r] of rec.renderers.entries()) {
      expect(ops.filter((op) => r.isMatch(`sandbox-code-runner::${op}`))).toEqual([ops[i]]);
      expect(r.isMatch("sandbox-code-runner::stats")).toBe(false);
      expect(typeof r.tryRenderRunning).toBe("function");
      expect(r.redactRaw?.({ runtime_id: "rt-10f3bc08-c2e8-41d9-8d66-5efb6e02ad86" })).toEqual({ runtime_id: "rt-10f3…" });
    }
    expect(typeof teardown).toBe("function");
    teardown();
    expect(rec.unregistered.sort()).toEqual(rec.renderers.map((r) => r.id).sort());
  });

  it("renders a call through the console's React, in flight and settled, and falls through otherwise", async () => {
    const { default: setup } = await import("../src/cards-setup");
    const rec = fakeHost("sandbox-code-runner/cards.js");
    await setup(rec.host);
    const run = rec.renderers[0] as FunctionTriggerRenderer;
    const kept = toMessage(fixture("run-node-keep"));
    const node = run.tryRender(kept);
    expect(node).not.toBeNull();
    // The host renders the same message again: the same element.
    expect(run.tryRender(kept)).toBe(node);
    const { el, unmount } = await render(node);
    expect(el.querySelector("article.scr-card")?.getAttribute("data-tone")).toBe("ok");
    expect(el.querySelector(".scr-chip")?.textContent).toContain("rt-10f3…");
    expect(el.innerHTML).not.toContain("10f3bc08-c2e8");
    await unmount();
    expect(el.innerHTML).toBe("");

    const pending = await render(run.tryRenderRunning?.(toMessage(fixture("run-pending"))));
    expect(pending.el.textContent).toContain("Running…");
    await pending.unmount();

    for (const other of [
      { ...kept, functionId: "sandbox-code-runner::teardown" },
      { ...kept, functionId: "other::run" },
      { ...kept, pendingApproval: true },
      { ...kept, input: "not an object" },
    ]) expect(run.tryRender(other)).toBeNull();
  });

  it("hands the renderers host.iii.trigger, bound: a running streamed run's card polls watch through it", async () => {
    const { default: setup } = await import("../src/cards-setup");
    const rec = fakeHost("sandbox-code-runner/cards.js");
    const seen: { self: unknown; functionId: string; payload: unknown }[] = [];
    rec.host.iii = {
      async trigger(this: unknown, functionId: string, payload?: Record<string, unknown>) {
        seen.push({ self: this, functionId, payload });
        return { frames: [{ seq: 0, type: "stdout", data: "step 0: loading shard 0\n" }], next: 0, ended: true, skipped: 0 };
      },
    };
    await setup(rec.host);
    const run = rec.renderers[0] as FunctionTriggerRenderer;
    const streaming = fixture("run-streaming");
    const { el, unmount } = await render(run.tryRenderRunning?.(toMessage(streaming)));
    await vi.waitFor(() => expect(el.querySelector(".scr-live")?.textContent).toContain("step 0: loading shard 0"));
    expect(seen[0]?.self).toBe(rec.host.iii);
    expect(seen[0]?.functionId).toBe("sandbox-code-runner::watch");
    expect(seen[0]?.payload).toEqual({ output: (streaming.input as { output: unknown }).output });
    expect(el.innerHTML).not.toContain((streaming.input as { output: { access_key: string } }).output.access_key);
    await unmount();
  });
});

describe("page.js setup(host)", () => {
  it("registers the runtimes page with the worker's configuration entry; the page lists runtimes", async () => {
    const { default: setup } = await import("../src/page");
    const rec = fakeHost("sandbox-code-runner/page.js");
    const off = await setup(rec.host);
    expect(rec.pages).toHaveLength(1);
    const page = rec.pages[0] as PageRegistration;
    expect({ id: page.id, title: page.title, configurationId: page.configurationId }).toEqual({
      id: "sandbox-code-runner-runtimes",
      title: "Sandbox runtimes",
      configurationId: "sandbox-code-runner",
    });
    const React = await import("react");
    const { el, unmount } = await render(React.createElement(page.render as never));
    await vi.waitFor(() => expect(el.textContent).toContain("0 live runtimes"));
    expect(rec.calls).toEqual(["sandbox-code-runner::list_runtimes"]);
    await unmount();
    off();
    expect(rec.unregistered).toEqual(["sandbox-code-runner-runtimes"]);
  });
});

describe("without the console's shared React", () => {
  for (const [asset, entry] of [
    ["cards.js", "../src/cards-setup"],
    ["page.js", "../src/page"],
  ] as const) {
    it(`${asset} logs why and registers nothing`, async () => {
      vi.doMock("react", () => ({ default: {} }));
      const errors = vi.spyOn(console, "error").mockImplementation(() => {});
      const { default: setup } = (await import(/* @vite-ignore */ entry)) as { default: (h: Host) => Promise<unknown> };
      const rec = fakeHost(`sandbox-code-runner/${asset}`);
      await expect(setup(rec.host)).rejects.toThrow(/shared React is missing/);
      expect(errors).toHaveBeenCalledTimes(1);
      expect(String(errors.mock.calls[0]?.[0])).toMatch(new RegExp(`^\\[sandbox-code-runner\\] ${asset.replace(".", "\\.")}: the console's shared React is missing`));
      expect(rec.renderers).toEqual([]);
      expect(rec.pages).toEqual([]);
    });
  }
});
