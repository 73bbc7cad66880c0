/**
 * The stand-in console's function-trigger card, after FunctionTriggerCard in
 * iii-hq/workers: a header (status, function id, duration); the body from
 * the first renderer that claims the id and answers non-null (injected ones
 * fenced and wrapped in their scope, then the console's own families), with
 * a "raw json" tab beside it; else the JSON fallback. The raw panes and their
 * copy buttons show the request and the response through `rawRedactor`,
 * and a redactor that throws shows a placeholder, never the raw value.
 */

import * as React from "react";
import type { FunctionTriggerMessage, FunctionTriggerRenderer } from "../../src/console";
import { claims, rawRedactor, renderers, type RegisteredRenderer } from "./slots";

const h = React.createElement;

/** What the copy buttons handed to the clipboard, in order. */
export const copied: string[] = [];

/** What a raw pane shows when the worker's redactRaw threw. */
export const REDACTION_FAILED = "[not shown: this call's redactRaw failed]";

async function copyText(text: string): Promise<void> {
  copied.push(text);
  try {
    await navigator.clipboard?.writeText(text);
  } catch {
    // Headless: no clipboard permission; the record above is what tests read.
  }
}

class ErrorBoundary extends React.Component<{ path: string; children?: unknown }, { error: Error | null }> {
  state = { error: null as Error | null };
  static getDerivedStateFromError(error: Error) {
    return { error };
  }
  render() {
    return this.state.error ? h(ExtErrorChip, { path: this.props.path, error: this.state.error }) : this.props.children;
  }
}

function ExtErrorChip({ path, error }: { path: string; error: Error }) {
  return h("span", { className: "ft-chip", title: error.message, "data-ext-error": path }, `extension crashed · ${path}`);
}

/** The wrapper of every injected render: its scope (worker CSS is scoped under it) and a boundary. */
export function ScopedExtension({ scope, path, children }: { scope: string; path: string; children?: unknown }) {
  return h("div", { "data-iii-ui": scope, style: { display: "contents" } }, h(ErrorBoundary, { path }, children));
}

/** A throw in tryRender* becomes a chip naming the script; a node mounts inside its scope. */
function fence({ renderer, scope, path }: RegisteredRenderer): FunctionTriggerRenderer {
  const wrap = (render: (m: FunctionTriggerMessage) => unknown) => (m: FunctionTriggerMessage) => {
    let node: unknown = null;
    try {
      node = render(m);
    } catch (error) {
      console.error(`[iii-ui] renderer ${renderer.id} threw`, error);
      return h(ExtErrorChip, { path, error: error instanceof Error ? error : new Error(String(error)) });
    }
    return node == null ? null : h(ScopedExtension, { scope, path }, node);
  };
  return {
    id: renderer.id,
    isMatch: (id) => claims(renderer, id),
    tryRender: wrap((m) => renderer.tryRender(m)),
    tryRenderRunning: renderer.tryRenderRunning ? wrap((m) => renderer.tryRenderRunning?.(m) ?? null) : undefined,
  };
}

/** The console's own families, after every injected renderer (one stand-in family). */
const FIRST_PARTY: readonly FunctionTriggerRenderer[] = [
  {
    id: "first-party/demo",
    isMatch: (id) => id.startsWith("demo::"),
    tryRender: (m) => (m.functionId === "demo::echo" ? h("div", { className: "fp-echo" }, `first-party card for ${m.functionId}`) : null),
  },
];

function useInjected(): readonly RegisteredRenderer[] {
  return React.useSyncExternalStore(renderers.subscribe, renderers.get);
}

/** Injected first (registration order), then first-party; only claiming renderers are asked; first non-null wins. */
function dispatch(list: readonly FunctionTriggerRenderer[], m: FunctionTriggerMessage, running: boolean): unknown {
  for (const r of list) {
    if (!claims(r, m.functionId)) continue;
    const node = running ? (r.tryRenderRunning ?? r.tryRender)(m) : r.tryRender(m);
    if (node != null) return node;
  }
  return null;
}

export function isErrorOutput(v: unknown): boolean {
  return !!v && typeof v === "object" && !Array.isArray(v) && "error" in (v as object);
}

function formatJson(v: unknown): string {
  try {
    return JSON.stringify(v, null, 2) ?? "undefined";
  } catch {
    return String(v);
  }
}

function paneText(value: unknown, redact: ((v: unknown) => unknown) | undefined): string {
  if (!redact) return formatJson(value);
  try {
    return formatJson(redact(value));
  } catch {
    return REDACTION_FAILED;
  }
}

function ValuePane({ label, value, redact }: { label: string; value: unknown; redact?: (v: unknown) => unknown }) {
  const text = paneText(value, redact);
  return h(
    "div",
    { className: "ft-pane", "data-function-pane": label },
    h("div", { className: "ft-pane-head" }, h("span", null, value === undefined ? `${label} · empty` : label), h("button", { type: "button", "aria-label": `copy ${label}`, onClick: () => void copyText(text) }, "copy")),
    value === undefined ? null : h("pre", null, text),
  );
}

export function FunctionTriggerCard({ message }: { message: FunctionTriggerMessage }) {
  const injected = useInjected();
  const [tab, setTab]: ["terminal" | "json", (t: "terminal" | "json") => void] = React.useState("terminal");
  const list = React.useMemo(() => [...injected.map(fence), ...FIRST_PARTY], [injected]);
  const redact = React.useMemo(() => rawRedactor(injected.map((e) => e.renderer), message.functionId), [injected, message.functionId]);
  const running = message.running === true;
  const custom = dispatch(list, message, running);
  const status = running ? "running" : isErrorOutput(message.output) ? "error" : "done";
  const request = h(ValuePane, { label: "request", value: message.input, redact });
  const response = h(ValuePane, { label: "response", value: message.output, redact });
  let body: unknown;
  if (running) body = custom ?? response;
  else if (custom != null) {
    const tabButton = (id: "terminal" | "json", label: string) => h("button", { type: "button", role: "tab", "aria-selected": String(tab === id), onClick: () => setTab(id) }, label);
    body = [h("div", { key: "tabs", className: "ft-tabs", role: "tablist" }, tabButton("terminal", "terminal"), tabButton("json", "raw json")), h("div", { key: "pane", className: "ft-body" }, tab === "terminal" ? custom : [h("div", { key: "req" }, request), h("div", { key: "res" }, response)])];
  } else body = h("div", { className: "ft-body" }, request, response);
  return h(
    "div",
    { className: "ft", "data-message-id": message.id, "data-function-id": message.functionId, "data-function-status": status, "data-rendered-by": custom != null ? "renderer" : "json" },
    h(
      "div",
      { className: "ft-head" },
      h("span", { className: "ft-status", "data-s": status }, running ? "●" : status === "error" ? "✕" : "✓"),
      h("span", null, `${running ? "triggering" : "triggered"} ƒ ${message.functionId}`),
      !running && typeof message.durationMs === "number" ? h("span", { className: "ft-dur" }, `for ${message.durationMs} ms`) : null,
    ),
    running && custom != null ? h("div", { className: "ft-body" }, body) : body,
  );
}
