/**
 * The card of one call, rendered: as a tree (with the call's own text
 * redactor), as an HTML string (tests), or as live DOM in a document (the
 * console, through `renderers.ts`). A call no card can read gives null.
 */

import { RENDERERS, kindOf } from "./cards";
import type { Invocation } from "./frame";
import { LIVE_ATTR, outputRefOf, startLive, type ChannelRef, type Trigger } from "./live";
import { collectSecrets, makeRedactor, type TextRedactor } from "./redact";
import { renderToDom, renderToString, type Env, type VElement } from "./vnode";

export interface MountOptions {
  /** Clipboard writer; defaults to `navigator.clipboard.writeText`. */
  copy?: (text: string) => Promise<void>;
  /** Force reduced motion on or off; defaults to `prefers-reduced-motion`. */
  reducedMotion?: boolean;
  /** The console's engine call (`host.iii.trigger`): a running streamed run's card shows its output live through it. */
  trigger?: Trigger;
}

/** A card tree and the filter its text goes through: ids by shape, plus whatever came under a runtime_id key. */
export interface Card {
  tree: VElement;
  redact: TextRedactor;
  /** A running run's `output` writer ref: its live view reads through it (never rendered). */
  live?: ChannelRef;
}

/** The card of `inv`, or null when no card reads it (another function, a request that is no object, a renderer bug). */
export function cardOf(inv: Invocation): Card | null {
  const kind = kindOf(inv.function_id);
  if (!kind) return null;
  if (!inv.input || typeof inv.input !== "object" || Array.isArray(inv.input)) {
    // list_runtimes takes `{}`; a missing request there is still readable.
    if (kind !== "list_runtimes" || inv.input !== undefined) return null;
  }
  const redact = makeRedactor(collectSecrets(inv));
  try {
    const card: Card = { tree: RENDERERS[kind](inv, { redact }), redact };
    const live = kind === "run" && inv.running ? outputRefOf(inv.input) : null;
    if (live) card.live = live;
    return card;
  } catch {
    return null;
  }
}

/** The card as an HTML string, or "" when there is none. */
export function renderCardToString(inv: Invocation): string {
  const card = cardOf(inv);
  return card ? renderToString(card.tree, card.redact) : "";
}

function prefersReducedMotion(win: (Window & typeof globalThis) | null): boolean {
  try {
    return !!win?.matchMedia?.("(prefers-reduced-motion: reduce)").matches;
  } catch {
    return false;
  }
}

/** Copies through the async clipboard, falling back to a transient selection. */
export function defaultCopy(doc: Document): (text: string) => Promise<void> {
  return async (text: string) => {
    const nav = doc.defaultView?.navigator;
    if (nav?.clipboard?.writeText) {
      await nav.clipboard.writeText(text);
      return;
    }
    const ta = doc.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    doc.body.appendChild(ta);
    try {
      ta.select();
      if (!doc.execCommand("copy")) throw new Error("copy refused");
    } finally {
      ta.remove();
    }
  };
}

/** Replaces `host`'s content with the live card (a running streamed run's output polled while it is there); returns a function that removes it. */
export function mountCard(host: Element, card: Card, options: MountOptions = {}): () => void {
  const doc = host.ownerDocument;
  const env: Env = {
    copy: options.copy ?? defaultCopy(doc),
    reducedMotion: options.reducedMotion ?? prefersReducedMotion(doc.defaultView as (Window & typeof globalThis) | null),
  };
  const el = renderToDom(card.tree, doc, env, card.redact);
  host.replaceChildren(el);
  const spot = card.live && options.trigger ? ((el as Element).querySelector?.(`[${LIVE_ATTR}]`) ?? null) : null;
  const stopLive = spot && card.live && options.trigger ? startLive(spot, card.live, options.trigger, card.redact, env) : null;
  return () => {
    stopLive?.();
    if (el.parentNode === host) host.removeChild(el);
  };
}
