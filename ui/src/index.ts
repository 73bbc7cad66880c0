/**
 * Public API of the sandbox-code-runner console cards (no side effects; the
 * bundle's entry, `register.ts`, publishes it on `globalThis`).
 */

import { RENDERERS, kindOf, type CardKind } from "./cards";
import { UI_ATTR, UI_NAME, frame, type Invocation } from "./frame";
import { collectSecrets, makeRedactor, redactRaw, redactText, redactedJson, shortId, type TextRedactor } from "./redact";
import { renderToDom, renderToString, type Env, type VElement } from "./vnode";

export { redactRaw, redactText, redactedJson, shortId, kindOf, UI_ATTR, UI_NAME };
export type { Invocation, CardKind };

export const VERSION = "0.1.0";

/** The functions these cards render. */
export const FUNCTIONS = [
  `${UI_NAME}::run`,
  `${UI_NAME}::register_function`,
  `${UI_NAME}::teardown`,
] as const;

export interface MountOptions {
  /** Clipboard writer; defaults to `navigator.clipboard.writeText`. */
  copy?: (text: string) => Promise<void>;
  /** Force reduced motion on or off; defaults to `prefers-reduced-motion`. */
  reducedMotion?: boolean;
}

/** The redactor of one call: ids by shape, plus whatever came under a runtime_id key. */
function redactorFor(inv: Invocation): TextRedactor {
  return makeRedactor(collectSecrets(inv));
}

function normalize(inv: unknown, functionId?: string): Invocation {
  const o = inv && typeof inv === "object" ? (inv as Record<string, unknown>) : {};
  return {
    function_id: typeof o.function_id === "string" ? o.function_id : functionId,
    input: o.input,
    output: o.output,
    error: o.error,
  };
}

/** The card tree of a call. Total: an unknown function or a renderer bug gives a raw card. */
export function cardTree(invocation: unknown, functionId?: string): { tree: VElement; redact: TextRedactor } {
  const inv = normalize(invocation, functionId);
  const redact = redactorFor(inv);
  const kind = kindOf(inv.function_id);
  if (kind) {
    try {
      return { tree: RENDERERS[kind](inv, { redact }), redact };
    } catch {
      // fall through to the raw card
    }
  }
  const tree = frame({
    fn: kind ?? "unknown",
    title: kind ?? (typeof inv.function_id === "string" ? inv.function_id.slice(inv.function_id.lastIndexOf("::") + 2) : "call"),
    badges: [],
    verdict: { tone: "neutral", headline: "No card for this call: see Raw" },
    sections: [],
    invocation: inv,
  });
  return { tree, redact };
}

/** The card as an HTML string (server-side rendering, tests). */
export function renderCardToString(invocation: unknown, functionId?: string): string {
  try {
    const { tree, redact } = cardTree(invocation, functionId);
    return renderToString(tree, redact);
  } catch {
    return "";
  }
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

/** The card as a live element of `doc`. */
export function renderCard(invocation: unknown, doc: Document = document, options: MountOptions = {}, functionId?: string): HTMLElement {
  const { tree, redact } = cardTree(invocation, functionId);
  const env: Env = {
    copy: options.copy ?? defaultCopy(doc),
    reducedMotion: options.reducedMotion ?? prefersReducedMotion(doc.defaultView as (Window & typeof globalThis) | null),
  };
  return renderToDom(tree, doc, env, redact) as HTMLElement;
}

/** Replaces `host`'s content with the card; returns a function that removes it. */
export function mount(host: Element, invocation: unknown, options: MountOptions = {}, functionId?: string): () => void {
  const card = renderCard(invocation, host.ownerDocument, options, functionId);
  host.replaceChildren(card);
  return () => {
    if (card.parentNode === host) host.removeChild(card);
  };
}

/** What the bundle registers with the console for each function. */
export interface RendererEntry {
  ui: typeof UI_NAME;
  function_id: string;
  slots: readonly string[];
  mount(host: Element, invocation: unknown, options?: MountOptions): () => void;
  renderToString(invocation: unknown): string;
  /** The console passes its own raw JSON tab through this. */
  redactRaw(value: unknown): unknown;
}

export function entries(): RendererEntry[] {
  return FUNCTIONS.map((function_id) => ({
    ui: UI_NAME,
    function_id,
    slots: ["chat", "trace"],
    mount: (host: Element, invocation: unknown, options?: MountOptions) => mount(host, invocation, options, function_id),
    renderToString: (invocation: unknown) => renderCardToString(invocation, function_id),
    redactRaw: (value: unknown) => redactRaw(value),
  }));
}

