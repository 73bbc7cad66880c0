/**
 * A very small virtual DOM: cards are built as plain data once, then either
 * serialised to an HTML string (server-side rendering, tests) or turned into
 * live DOM nodes (the console, the harness page).
 *
 * Both back ends pass every text node and every attribute value through the
 * card's redactor as they emit it, so a card that forgot to filter a string
 * still cannot show a runtime id. The only way to put a full id on a card is
 * {@link secretChip}, whose value lives in a closure, never in the tree.
 */

import { makeRedactor, shortId, type TextRedactor } from "./redact";

export type Attrs = Record<string, string | number | boolean | null | undefined>;

/** What a click handler can reach. */
export interface Env {
  /** Writes `text` to the clipboard (the console's, or the browser's). */
  copy(text: string): Promise<void>;
  /** Reduced motion is requested: skip transient effects. */
  reducedMotion: boolean;
}

export type ClickHandler = (el: HTMLElement, env: Env) => void;

export interface VElement {
  readonly kind: "el";
  readonly tag: string;
  readonly attrs: Attrs;
  readonly children: readonly VNode[];
  readonly onClick?: ClickHandler;
}

export interface VText {
  readonly kind: "text";
  readonly text: string;
}

export type VNode = VElement | VText;

export type Child = VNode | string | number | null | undefined | false | readonly Child[];

function flatten(children: readonly Child[], out: VNode[] = []): VNode[] {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) flatten(c as readonly Child[], out);
    else if (typeof c === "string" || typeof c === "number") {
      if (c !== "") out.push({ kind: "text", text: String(c) });
    } else out.push(c as VNode);
  }
  return out;
}

/** Builds an element. */
export function h(tag: string, attrs: Attrs | null, ...children: Child[]): VElement {
  return { kind: "el", tag, attrs: attrs ?? {}, children: flatten(children) };
}

/** Builds an element that reacts to a click. */
export function clickable(tag: string, attrs: Attrs | null, onClick: ClickHandler, ...children: Child[]): VElement {
  return { kind: "el", tag, attrs: attrs ?? {}, children: flatten(children), onClick };
}

/**
 * The only place a full runtime id may go: a chip that shows its short form
 * and copies the full value on an explicit click. The value is held by the
 * click handler's closure, not by the tree, the markup or the DOM.
 */
export function secretChip(secret: string, label = "runtime"): VElement {
  const short = shortId(secret);
  return clickable(
    "button",
    {
      type: "button",
      class: "scr-chip",
      title: `Copy the full ${label} id. It is a capability: share it only with whoever may use or tear down this runtime.`,
      "aria-label": `${label} id ${short}, click to copy the full value`,
    },
    (el, env) => {
      const done = (ok: boolean) => {
        el.classList.add(ok ? "is-copied" : "is-failed");
        const state = el.querySelector(".scr-chip-state");
        if (state) state.textContent = ok ? "copied" : "copy failed";
        el.ownerDocument.defaultView?.setTimeout(
          () => {
            el.classList.remove("is-copied", "is-failed");
            if (state) state.textContent = "copy";
          },
          env.reducedMotion ? 2500 : 1500,
        );
      };
      env.copy(secret).then(
        () => done(true),
        () => done(false),
      );
    },
    h("span", { class: "scr-chip-id" }, short),
    h("span", { class: "scr-chip-state", "aria-live": "polite" }, "copy"),
  );
}

const ESC: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ESC[c] as string);
}

const VOID = new Set(["br", "hr", "img", "input", "meta", "link", "wbr"]);
const NAME_RE = /^[a-zA-Z][a-zA-Z0-9-]*$/;

function attrText(v: Attrs[string]): string | null {
  if (v === null || v === undefined || v === false) return null;
  if (v === true) return "";
  return String(v);
}

/** Serialises a tree to HTML, redacting every text and attribute. */
export function renderToString(node: VNode, redact: TextRedactor = makeRedactor()): string {
  if (node.kind === "text") return escapeHtml(redact(node.text));
  if (!NAME_RE.test(node.tag)) return "";
  let out = `<${node.tag}`;
  for (const [k, v] of Object.entries(node.attrs)) {
    const t = attrText(v);
    if (t === null || !NAME_RE.test(k)) continue;
    out += t === "" && v === true ? ` ${k}` : ` ${k}="${escapeHtml(redact(t))}"`;
  }
  out += ">";
  if (VOID.has(node.tag)) return out;
  for (const c of node.children) out += renderToString(c, redact);
  return `${out}</${node.tag}>`;
}

/** Builds live DOM nodes, redacting every text and attribute. */
export function renderToDom(node: VNode, doc: Document, env: Env, redact: TextRedactor = makeRedactor()): Node {
  if (node.kind === "text") return doc.createTextNode(redact(node.text));
  const el = doc.createElement(NAME_RE.test(node.tag) ? node.tag : "span");
  for (const [k, v] of Object.entries(node.attrs)) {
    const t = attrText(v);
    if (t === null || !NAME_RE.test(k)) continue;
    el.setAttribute(k, redact(t));
  }
  for (const c of node.children) el.appendChild(renderToDom(c, doc, env, redact));
  const onClick = node.onClick;
  if (onClick) {
    el.addEventListener("click", (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      onClick(el, env);
    });
  }
  return el;
}

/** Plain text of a tree (what a screen reader or a copy of the card gets). */
export function textOf(node: VNode, redact: TextRedactor = makeRedactor()): string {
  if (node.kind === "text") return redact(node.text);
  return node.children.map((c) => textOf(c, redact)).join("");
}
