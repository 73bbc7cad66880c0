// @vitest-environment happy-dom
/**
 * A running streamed run's card, live (happy-dom, fake timers, a scripted
 * trigger): it polls `sandbox-code-runner::watch` with the run's writer ref
 * every ~300 ms, passing `after` on; shows stdout and stderr in order in
 * terminal blocks, redacted (runtime ids, the access key, even split over
 * frames); holds the last 64 KiB; stops when the stream ends, on an error
 * answer (saying so) and on unmount. Without a trigger or an `output` it
 * only says where the output goes, or nothing.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { invocationOf } from "../src/message";
import { cardOf, mountCard, type Card, type MountOptions } from "../src/render";
import { assertNoLeak, fixture, toMessage } from "./fixtures";

const STREAMING = fixture("run-streaming");
const REF = (STREAMING.input as { output: { channel_id: string; access_key: string; direction: string } }).output;
const KEY = REF.access_key;
const RUNTIME_ID = "rt-10f3bc08-c2e8-41d9-8d66-5efb6e02ad86";

interface Call {
  functionId: string;
  payload: Record<string, unknown>;
}

/** A trigger that answers `watch` from `script`, one answer per call (the last repeats); an Error in it is thrown. */
function scripted(script: unknown[]): { trigger: NonNullable<MountOptions["trigger"]>; calls: Call[] } {
  const calls: Call[] = [];
  const trigger = async (functionId: string, payload: Record<string, unknown> = {}) => {
    calls.push({ functionId, payload: structuredClone(payload) });
    const answer = script[Math.min(calls.length - 1, script.length - 1)];
    if (answer instanceof Error) throw answer;
    return structuredClone(answer);
  };
  return { trigger, calls };
}

function frame(seq: number, type: "stdout" | "stderr", data: string) {
  return { seq, type, data };
}

function running(input: unknown = STREAMING.input): Card {
  const inv = invocationOf({ ...toMessage(STREAMING), input }, true);
  const card = inv ? cardOf(inv) : null;
  if (!card) throw new Error("no card");
  return card;
}

function mount(card: Card, options: MountOptions): { el: HTMLElement; unmount: () => void } {
  const el = document.createElement("div");
  document.body.appendChild(el);
  return { el, unmount: mountCard(el, card, { copy: async () => {}, reducedMotion: true, ...options }) };
}

/** The terminal blocks of the live section: [stream, text]. */
function blocks(el: Element): [string, string][] {
  return Array.from(el.querySelectorAll(".scr-live figure.scr-term"), (f) => [f.querySelector("figcaption")?.textContent ?? "", f.querySelector("pre")?.textContent ?? ""]);
}

function liveText(el: Element): string {
  return el.querySelector(".scr-live")?.textContent ?? "";
}

beforeEach(() => {
  vi.useFakeTimers();
  document.body.replaceChildren();
});

afterEach(() => {
  vi.useRealTimers();
});

describe("a running streamed run's card, live", () => {
  it("polls watch with the run's writer ref every ~300 ms, passing after on, and shows both streams in order", async () => {
    const { trigger, calls } = scripted([
      { frames: [frame(0, "stdout", "step 0\n")], next: 0, ended: false, skipped: 0 },
      { frames: [frame(1, "stderr", "warn: slow shard\n"), frame(2, "stdout", "step 1\n")], next: 2, ended: false, skipped: 0 },
      { frames: [], next: 2, ended: false, skipped: 0 },
    ]);
    const { el } = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toEqual([{ functionId: "sandbox-code-runner::watch", payload: { output: REF } }]);
    expect(blocks(el)).toEqual([["stdout", "step 0"]]);
    await vi.advanceTimersByTimeAsync(250);
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(100);
    expect(calls[1]).toEqual({ functionId: "sandbox-code-runner::watch", payload: { output: REF, after: 0 } });
    expect(blocks(el)).toEqual([
      ["stdout", "step 0"],
      ["stderr", "warn: slow shard"],
      ["stdout", "step 1"],
    ]);
    await vi.advanceTimersByTimeAsync(350);
    expect(calls[2]?.payload).toEqual({ output: REF, after: 2 });
    await vi.advanceTimersByTimeAsync(3_000);
    expect(calls.length).toBeGreaterThanOrEqual(10);
    expect(calls.every((c) => c.functionId === "sandbox-code-runner::watch")).toBe(true);
    expect(blocks(el)).toHaveLength(3);
  });

  it("appends a stream's frames to its block and starts a new one when the stream changes", async () => {
    const { trigger } = scripted([{ frames: [frame(0, "stdout", "a"), frame(1, "stdout", "b\n"), frame(2, "stderr", "c\n"), frame(3, "stderr", "d\n")], next: 3, ended: false, skipped: 0 }]);
    const { el } = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(0);
    expect(blocks(el)).toEqual([
      ["stdout", "ab"],
      ["stderr", "c\nd"],
    ]);
  });

  it("redacts runtime ids and the run's access key, even one split over two frames", async () => {
    const { trigger } = scripted([
      { frames: [frame(0, "stdout", `kept ${RUNTIME_ID}\nkey ${KEY.slice(0, 10)}`)], next: 0, ended: false, skipped: 0 },
      { frames: [frame(1, "stdout", `${KEY.slice(10)} end\n`)], next: 1, ended: false, skipped: 0 },
    ]);
    const { el } = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(0);
    // Half a key is held back until the rest came.
    expect(liveText(el)).toContain("kept rt-10f3…\nkey");
    expect(el.innerHTML).not.toContain(KEY.slice(0, 8));
    await vi.advanceTimersByTimeAsync(300);
    const text = liveText(el);
    expect(text).toContain("kept rt-10f3…");
    expect(text).toContain(`key ${KEY.slice(0, 7)}… end`);
    expect(text).toContain("end");
    expect(el.innerHTML).not.toContain(KEY);
    expect(el.innerHTML).not.toContain(KEY.slice(0, 10));
    assertNoLeak(el.innerHTML, STREAMING, "live card");
    expect(el.innerHTML).not.toContain(RUNTIME_ID);
  });

  it("stops once the stream ended, saying so", async () => {
    const end = { seq: 1, type: "end", dropped: 0, exit_code: 0, success: true };
    const { trigger, calls } = scripted([{ frames: [frame(0, "stdout", "done\n")], next: 0, ended: true, end, skipped: 0 }]);
    const { el } = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toHaveLength(1);
    expect(blocks(el)).toEqual([["stdout", "done"]]);
    expect(liveText(el)).toContain("output ended");
  });

  it("stops on an error answer with a quiet note, keeping what it showed", async () => {
    const gone = Object.assign(new Error("invalid"), { code: "sandbox-code-runner::invalid_request" });
    const { trigger, calls } = scripted([{ frames: [frame(0, "stdout", "step 0\n")], next: 0, ended: false, skipped: 0 }, gone]);
    const { el } = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toHaveLength(2);
    expect(liveText(el)).toContain("Live output is no longer available.");
    expect(blocks(el)).toEqual([["stdout", "step 0"]]);
    expect(liveText(el)).not.toContain("invalid");
  });

  it("takes errors before the first answer as a run not taken in yet, for a few tries, then gives up", async () => {
    const unknown = Object.assign(new Error("invalid"), { code: "sandbox-code-runner::invalid_request" });
    const late = scripted([unknown, unknown, { frames: [frame(0, "stdout", "at last\n")], next: 0, ended: false, skipped: 0 }]);
    const first = mount(running(), { trigger: late.trigger });
    await vi.advanceTimersByTimeAsync(700);
    expect(late.calls).toHaveLength(3);
    expect(blocks(first.el)).toEqual([["stdout", "at last"]]);
    first.unmount();

    const never = scripted([unknown]);
    const second = mount(running(), { trigger: never.trigger });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(never.calls.length).toBeGreaterThan(1);
    expect(never.calls.length).toBeLessThanOrEqual(10);
    expect(liveText(second.el)).toContain("Live output is no longer available.");
  });

  it("stops polling on unmount, and an answer landing after it changes nothing", async () => {
    let release: (v: unknown) => void = () => {};
    const calls: Call[] = [];
    const trigger = (functionId: string, payload: Record<string, unknown> = {}) => {
      calls.push({ functionId, payload });
      if (calls.length === 1) return Promise.resolve({ frames: [frame(0, "stdout", "one\n")], next: 0, ended: false, skipped: 0 });
      return new Promise((ok) => (release = ok));
    };
    const first = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(0);
    first.unmount();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toHaveLength(1);
    expect(first.el.children.length).toBe(0);

    const second = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toHaveLength(2);
    const card = second.el.firstElementChild as Element;
    const before = card.innerHTML;
    second.unmount();
    release({ frames: [frame(7, "stdout", "late\n")], next: 7, ended: false, skipped: 0 });
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toHaveLength(2);
    expect(card.innerHTML).toBe(before);
    expect(card.textContent).not.toContain("late");
  });

  it("holds at most the last 64 KiB of text, saying the rest is not shown", async () => {
    const line = (i: number) => `<${String(i).padStart(4, "0")}>${"x".repeat(994)}\n`;
    const script = Array.from({ length: 10 }, (_, batch) => ({
      frames: Array.from({ length: 10 }, (_, j) => frame(batch * 10 + j, batch + j === 0 ? "stderr" : "stdout", line(batch * 10 + j))),
      next: batch * 10 + 9,
      ended: false,
      skipped: 0,
    }));
    const { trigger } = scripted(script);
    const { el } = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(300 * 10);
    const shown = blocks(el)
      .map(([, t]) => t)
      .join("");
    expect(shown.length).toBeLessThanOrEqual(64 * 1024);
    expect(shown.length).toBeGreaterThan(50_000);
    expect(shown).toContain("<0099>");
    expect(shown).not.toContain("<0000>");
    expect(blocks(el).map(([stream]) => stream)).toEqual(["stdout"]);
    expect(liveText(el)).toContain("Earlier output is not shown");
  });

  it("says frames it never got are not shown (the worker's tail dropped them)", async () => {
    const { trigger } = scripted([{ frames: [frame(40, "stdout", "late start\n")], next: 40, ended: false, skipped: 40 }]);
    const { el } = mount(running(), { trigger });
    await vi.advanceTimersByTimeAsync(0);
    expect(liveText(el)).toContain("Earlier output is not shown");
    expect(blocks(el)).toEqual([["stdout", "late start"]]);
  });
});

describe("without what the live view needs", () => {
  it("without a trigger: a note on where the output goes, and no call", () => {
    const { el } = mount(running(), {});
    expect(el.querySelector(".scr-live")).not.toBeNull();
    expect(liveText(el)).toContain("Streamed to the caller's channel");
    expect(el.innerHTML).not.toContain(KEY);
  });

  it("without an output ref, or with a reader ref: no live section, no call", async () => {
    const { trigger, calls } = scripted([{ frames: [], ended: false, skipped: 0 }]);
    const { output: _gone, ...plain } = STREAMING.input as Record<string, unknown>;
    for (const input of [plain, { ...plain, output: { ...REF, direction: "read" } }, { ...plain, output: { channel_id: "c" } }]) {
      const { el } = mount(running(input), { trigger });
      expect(el.querySelector(".scr-live")).toBeNull();
      expect(el.textContent).not.toContain("Live output");
    }
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toEqual([]);
  });

  it("a settled run's card has no live section and calls nothing", async () => {
    const { trigger, calls } = scripted([{ frames: [], ended: false, skipped: 0 }]);
    const answered = { ...STREAMING, output: { stdout: "done\n", stderr: "", exit_code: 0, success: true, duration_ms: 5100, result: null, output: { frames: 6, dropped: 0, cut: false } } };
    const inv = invocationOf(toMessage(answered));
    const card = inv ? cardOf(inv) : null;
    if (!card) throw new Error("no card");
    const { el } = mount(card, { trigger });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(el.querySelector(".scr-live")).toBeNull();
    expect(calls).toEqual([]);
  });
});
