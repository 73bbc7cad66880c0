/**
 * The "Live output" section of a running run's card: while the card is
 * mounted and the run runs, it polls `sandbox-code-runner::watch` with the
 * run's `output` writer ref (every ~300 ms, one call at a time) and appends
 * what the run wrote to stdout and stderr into terminal blocks, in order.
 * Every text goes through the card's redactor; the DOM holds the last
 * 64 KiB; polling stops when the stream ends, on an error answer (a quiet
 * note says so; before any answer a few are taken as the worker not having
 * taken the run in yet) and on unmount. The ref (its `access_key` a secret) stays
 * in this closure: it is never in the card's tree or its text.
 */

import { MAX_BLOCK_CHARS, record, section, terminal } from "./frame";
import { WATCH } from "./ids";
import { offMatch, unfinishedAt, type TextRedactor } from "./redact";
import { h, renderToDom, type Env, type VElement } from "./vnode";

/** The console's engine call (`host.iii.trigger`). */
export type Trigger = (functionId: string, payload?: Record<string, unknown>, options?: { timeoutMs?: number }) => Promise<unknown>;

/** A data channel's writer ref, as a run's `output` carries it. */
export interface ChannelRef {
  channel_id: string;
  access_key: string;
  direction: string;
}

/** Pause between two `watch` calls. */
export const POLL_MS = 300;
/** Text the live view holds at most (characters, a terminal block's bound); older text goes first. */
export const LIVE_MAX_CHARS = MAX_BLOCK_CHARS;
/** How long one `watch` call may take. */
const CALL_TIMEOUT_MS = 10_000;
/**
 * Error answers taken before the first answer: the card shows the call as
 * soon as it is sent, so the worker may not have taken the run in yet (its
 * writer ref is then unknown). After an answer, an error ends the view.
 */
export const EARLY_ERRORS = 10;
/** Marks the element the live view mounts into. */
export const LIVE_ATTR = "data-scr-live";

const NOTES = {
  waiting: "Streamed to the caller's channel as the run writes it.",
  empty: "Nothing written yet.",
  ended: "The run's output ended; its answer shows here when it lands.",
  gone: "Live output is no longer available.",
} as const;

/** The writer ref under a run's `output`, or null when it has none. */
export function outputRefOf(input: unknown): ChannelRef | null {
  const o = record(record(input).output);
  const { channel_id, access_key, direction } = o;
  if (typeof channel_id !== "string" || typeof access_key !== "string" || channel_id === "" || access_key === "") return null;
  if (direction !== "write") return null;
  return { channel_id, access_key, direction };
}

/** The section a running streamed run's card holds: a note, until the live view mounts in it. */
export function liveSection(): VElement {
  return section("Live output", null, h("div", { class: "scr-live", [LIVE_ATTR]: "" }, h("p", { class: "scr-empty scr-live-note" }, NOTES.waiting)));
}

type Stream = "stdout" | "stderr";

interface Block {
  stream: Stream;
  text: string;
}

interface Frame {
  seq: number;
  stream: Stream;
  data: string;
}

/** The frames of a `watch` answer that read as data frames, in order. */
function framesOf(answer: Record<string, unknown>): Frame[] {
  const list = Array.isArray(answer.frames) ? answer.frames : [];
  const out: Frame[] = [];
  for (const f of list) {
    const r = record(f);
    if (typeof r.seq === "number" && (r.type === "stdout" || r.type === "stderr") && typeof r.data === "string") out.push({ seq: r.seq, stream: r.type, data: r.data });
  }
  return out;
}

/** What the view holds: blocks of one stream each, at most `max` characters in all. */
class Held {
  blocks: Block[] = [];
  trimmed = false;
  constructor(
    private readonly max: number,
    private readonly redact: TextRedactor,
  ) {}

  add(stream: Stream, data: string): void {
    const last = this.blocks[this.blocks.length - 1];
    if (last && last.stream === stream) last.text += data;
    else this.blocks.push({ stream, text: data });
    let excess = this.blocks.reduce((n, b) => n + b.text.length, 0) - this.max;
    while (excess > 0 && this.blocks.length > 0) {
      this.trimmed = true;
      const first = this.blocks[0] as Block;
      if (first.text.length <= excess) {
        excess -= first.text.length;
        this.blocks.shift();
        continue;
      }
      // Never cut into a secret: it would show unredacted.
      first.text = first.text.slice(offMatch(first.text, excess, this.redact));
      excess = 0;
    }
  }

}

/**
 * Starts the live view in `el` (the section's `[data-scr-live]` element):
 * polls `watch` for `ref` through `trigger`; returns the function that stops
 * it (the card's unmount).
 */
export function startLive(el: Element, ref: ChannelRef, trigger: Trigger, redact: TextRedactor, env: Env, { pollMs = POLL_MS, maxChars = LIVE_MAX_CHARS } = {}): () => void {
  const doc = el.ownerDocument;
  const held = new Held(maxChars, redact);
  let after: number | undefined;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let note: string = NOTES.waiting;
  let answered = false;
  let early = 0;

  const draw = () => {
    // While the stream goes on, the end of each stream's last block waits
    // until it cannot be part of an id or a secret still arriving.
    const last = new Map(held.blocks.map((b) => [b.stream, b] as const));
    const shownText = (b: Block) => (note !== NOTES.ended && last.get(b.stream) === b ? b.text.slice(0, unfinishedAt(b.text, redact)) : b.text);
    const blocks = held.blocks.map((b) => terminal(b.stream, shownText(b), "neutral", redact)).filter((b): b is VElement => b !== null);
    const shown = blocks.length === 0 && note === NOTES.waiting ? NOTES.empty : note;
    const tree = h(
      "div",
      { class: "scr-live-body" },
      held.trimmed ? h("p", { class: "scr-more" }, "Earlier output is not shown: this view keeps the last 64,000 characters.") : null,
      blocks,
      shown === NOTES.waiting ? null : h("p", { class: "scr-empty scr-live-note", role: "status" }, shown),
    );
    el.replaceChildren(renderToDom(tree, doc, env, redact));
    el.setAttribute("data-scr-live-state", note === NOTES.gone ? "gone" : note === NOTES.ended ? "ended" : "live");
    for (const pre of Array.from(el.querySelectorAll(".scr-term-body"))) pre.scrollTop = pre.scrollHeight;
  };

  const poll = async () => {
    timer = undefined;
    if (stopped) return;
    let answer: Record<string, unknown>;
    try {
      answer = record(await trigger(WATCH, after === undefined ? { output: { ...ref } } : { output: { ...ref }, after }, { timeoutMs: CALL_TIMEOUT_MS }));
    } catch {
      if (stopped) return;
      if (!answered && ++early < EARLY_ERRORS) {
        timer = setTimeout(() => void poll(), pollMs);
        return;
      }
      note = NOTES.gone;
      draw();
      return;
    }
    if (stopped) return;
    answered = true;
    let changed = false;
    for (const f of framesOf(answer)) {
      if (after !== undefined && f.seq <= after) continue;
      held.add(f.stream, f.data);
      after = f.seq;
      changed = true;
    }
    if (typeof answer.next === "number" && (after === undefined || answer.next > after)) after = answer.next;
    if (typeof answer.skipped === "number" && answer.skipped > 0 && !held.trimmed) {
      held.trimmed = true;
      changed = true;
    }
    const ended = answer.ended === true;
    if (ended) note = NOTES.ended;
    if (changed || ended) draw();
    if (!ended) timer = setTimeout(() => void poll(), pollMs);
  };

  draw();
  void poll();
  return () => {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
}
