/**
 * The card frame every renderer shares: a header (function, badges), a
 * verdict bar and the body sections. The raw JSON of a call is the console's
 * to show (its raw-JSON pane, through the renderer's `redactRaw`), not the
 * card's.
 */

import { redactClipped, redactText, type TextRedactor } from "./redact";
import { h, type Child, type VElement, type VNode } from "./vnode";
import { toLines, tokenize, type Lang } from "./highlight";

/** Mount point attribute: every CSS rule is scoped under it. */
export const UI_ATTR = "data-iii-ui";
export { UI_NAME } from "./ids";
import { UI_NAME } from "./ids";

/** One call as a card reads it (see `message.ts` for how a console message becomes one). */
export interface Invocation {
  /** `sandbox-code-runner::run`, `::register_function`, `::teardown` or `::list_runtimes`. */
  function_id?: string;
  /** The request payload. */
  input?: unknown;
  /** The response body, when the call answered. */
  output?: unknown;
  /** The invocation error, when the call failed: `{code, message}` or text. */
  error?: unknown;
  /** The call is in flight: no answer yet. */
  running?: boolean;
}

export type Tone = "ok" | "warn" | "alert" | "pending" | "neutral";

export interface Verdict {
  tone: Tone;
  headline: Child;
  /** Short facts after the headline: exit code, duration, counts. */
  facts?: Child[];
  /** One explanatory sentence under the headline. */
  detail?: Child;
  /** Right-hand side of the verdict bar (e.g. the runtime chip). */
  aside?: Child;
}

export interface FrameSpec {
  fn: string;
  title: string;
  badges: Child[];
  verdict: Verdict;
  sections: Child[];
}

const ICONS: Record<Tone, string> = {
  ok: "✓",
  warn: "!",
  alert: "✕",
  pending: "…",
  neutral: "•",
};

export function badge(text: Child, kind = "plain"): VElement {
  return h("span", { class: `scr-badge scr-badge-${kind}` }, text);
}

export function mono(text: Child): VElement {
  return h("code", { class: "scr-mono" }, text);
}

export function section(title: Child, meta: Child, ...body: Child[]): VElement {
  return h(
    "section",
    { class: "scr-section" },
    h("header", { class: "scr-section-head" }, h("h4", { class: "scr-section-title" }, title), meta ? h("span", { class: "scr-section-meta" }, meta) : null),
    ...body,
  );
}

/** Text over this many characters is cut (head and tail kept) on a card. */
export const MAX_BLOCK_CHARS = 64_000;
/** Source over this many lines is cut on a card. */
export const MAX_SOURCE_LINES = 1_500;

/** Redacts and cuts a long text, keeping its head and tail around a marker. */
export function boundText(s: unknown, redact: TextRedactor = redactText): { text: string; omitted: number } {
  const raw = typeof s === "string" ? s : "";
  const text = redactClipped(raw, MAX_BLOCK_CHARS, redact);
  return { text, omitted: Math.max(0, raw.length - MAX_BLOCK_CHARS) };
}

/** Source code, highlighted, with line numbers drawn by CSS. */
export function codeBlock(source: unknown, lang: Lang | string | null | undefined, redact: TextRedactor = redactText): VElement {
  // Redact before tokenizing: tokens are cut from text that holds no id, so
  // no id can survive split across two tokens.
  const src = redact(typeof source === "string" ? source : "");
  const lines = toLines(tokenize(src, lang));
  // A final newline ends the last line; it does not start an empty one.
  if (lines.length > 1 && (lines[lines.length - 1] as unknown[]).length === 0) lines.pop();
  const shown = lines.length > MAX_SOURCE_LINES ? lines.slice(0, MAX_SOURCE_LINES) : lines;
  return h(
    "div",
    { class: "scr-code-wrap" },
    h(
      "pre",
      { class: "scr-code", "data-lang": lang ?? "node", tabindex: 0 },
      h(
        "code",
        null,
        shown.map((line) =>
          h(
            "span",
            { class: "scr-line" },
            line.length === 0 ? "\u200b" : line.map((t) => (t.type === "ws" || t.type === "id" ? t.text : h("span", { class: `tok-${t.type}` }, t.text))),
          ),
        ),
      ),
    ),
    lines.length > shown.length ? h("p", { class: "scr-more" }, `… ${lines.length - shown.length} more lines not shown`) : null,
  );
}

/** A terminal-style block for stdout or stderr. */
export function terminal(stream: "stdout" | "stderr", value: unknown, tone: Tone, redact: TextRedactor = redactText): VElement | null {
  const { text, omitted } = boundText(value, redact);
  if (text === "") return null;
  const body = text.endsWith("\n") ? text.slice(0, -1) : text;
  return h(
    "figure",
    { class: `scr-term scr-term-${stream}`, "data-tone": stream === "stderr" ? tone : "neutral" },
    h("figcaption", { class: "scr-term-head" }, h("span", { class: "scr-term-dot" }), stream, omitted > 0 ? h("span", { class: "scr-term-note" }, `${omitted.toLocaleString("en-US")} characters omitted from the middle`) : null),
    h("pre", { class: "scr-term-body", tabindex: 0 }, body),
  );
}

/** A callout: advice or an explanation beside the main content. */
export function callout(tone: Tone, title: Child, ...body: Child[]): VElement {
  return h("aside", { class: "scr-callout", "data-tone": tone, role: "note" }, h("strong", { class: "scr-callout-title" }, title), h("div", { class: "scr-callout-body" }, ...body));
}

/** A label/value row ("namespace  my-app::"). */
export function fieldRow(label: Child, value: Child, hint?: Child): VElement {
  return h(
    "div",
    { class: "scr-field" },
    h("span", { class: "scr-field-label" }, label),
    h("span", { class: "scr-field-value" }, value),
    hint ? h("span", { class: "scr-field-hint" }, hint) : null,
  );
}

/** The whole card. */
export function frame(spec: FrameSpec): VElement {
  const { verdict } = spec;
  return h(
    "article",
    {
      class: "scr-card",
      [UI_ATTR]: UI_NAME,
      "data-fn": spec.fn,
      "data-tone": verdict.tone,
      "aria-label": `${spec.title}: ${typeof verdict.headline === "string" ? verdict.headline : verdict.tone}`,
    },
    h(
      "header",
      { class: "scr-head" },
      h("span", { class: "scr-fn" }, h("span", { class: "scr-fn-ns" }, `${UI_NAME}::`), h("span", { class: "scr-fn-name" }, spec.title)),
      h("span", { class: "scr-badges" }, ...spec.badges),
    ),
    h(
      "div",
      { class: "scr-body" },
      h(
        "div",
        { class: "scr-verdict", "data-tone": verdict.tone, role: "status" },
        h("span", { class: "scr-verdict-icon", "aria-hidden": "true" }, ICONS[verdict.tone]),
        h(
          "div",
          { class: "scr-verdict-main" },
          h("div", { class: "scr-verdict-line" }, h("strong", { class: "scr-verdict-headline" }, verdict.headline), ...(verdict.facts ?? []).filter((f) => f !== null && f !== undefined && f !== false && f !== "").map((f) => h("span", { class: "scr-fact" }, f))),
          verdict.detail ? h("p", { class: "scr-verdict-detail" }, verdict.detail) : null,
        ),
        verdict.aside ? h("div", { class: "scr-verdict-aside" }, verdict.aside) : null,
      ),
      ...spec.sections,
    ),
  );
}

/** This worker's error code named in `text` (`sandbox-code-runner::expired`), else any `ns::code` at its head. */
function codeIn(text: string): string {
  const ours = new RegExp(`${UI_NAME}::[a-z_]+`).exec(text);
  if (ours) return ours[0];
  const head = /^([\w-]+::[\w-]+)/.exec(text);
  return head ? (head[1] as string) : "";
}

/**
 * `{code, message}` of an invocation error, whatever shape it came in: the
 * worker's `{code, message}`, a string (`"code: detail"`, or a trace's
 * `"Error: code: detail"`), or the console's `{kind, message}`.
 */
export function errorParts(error: unknown): { code: string; message: string } {
  if (typeof error === "string") {
    const code = codeIn(error);
    const at = code ? error.indexOf(code) : -1;
    // A trace prefixes the exception type ("Error: "); the message starts at the code.
    return { code, message: at > 0 && at < 40 ? error.slice(at) : error };
  }
  if (error && typeof error === "object") {
    const o = error as Record<string, unknown>;
    const message = typeof o.message === "string" ? o.message : typeof o.error === "string" ? o.error : "";
    const code = typeof o.code === "string" ? o.code : codeIn(message);
    return { code, message };
  }
  return { code: "", message: "" };
}

const ERROR_HINTS: Record<string, string> = {
  invalid_request: "The request was refused before anything ran. Fix the named field and call again.",
  runtime_not_found: "No such runtime: the id is unknown (or the worker restarted), or the namespace has no live runtime.",
  expired: "The runtime's VM was reaped after sitting idle. Start a fresh one.",
  capacity: "iii-sandbox refused a new sandbox. Retry later.",
  timeout: "The call ran past its deadline.",
  handler_error: "The handler threw, or returned something JSON cannot carry.",
  engine: "Infrastructure failure between the worker, the engine and iii-sandbox.",
};

/** The verdict of a failed invocation: an alert, with the code's meaning. */
export function errorVerdict(error: unknown): Verdict {
  const { code, message } = errorParts(error);
  const short = code.includes("::") ? code.slice(code.lastIndexOf("::") + 2) : code;
  // The message repeats the code at its head (the wire envelope); show it once.
  const body = message.startsWith(`${code}: `) ? message.slice(code.length + 2) : message;
  return {
    tone: "alert",
    headline: short ? `Failed: ${short}` : "Failed",
    detail: h(
      "span",
      null,
      body ? h("span", { class: "scr-error-message" }, body) : null,
      ERROR_HINTS[short] ? h("span", { class: "scr-error-hint" }, ERROR_HINTS[short]) : null,
    ),
  };
}

export const PENDING: Verdict = { tone: "pending", headline: "Running…", detail: "The call is in flight; its answer shows here when it lands." };

/** A settled call whose answer this view cannot read (aborted, or not paired yet). */
export const NO_RESPONSE: Verdict = { tone: "neutral", headline: "No response recorded" };

/** The verdict of a call without a response body: its error, in flight, or none recorded; null when it has one. */
export function unsettledVerdict(inv: Invocation): Verdict | null {
  if (inv.error !== undefined && inv.error !== null) return errorVerdict(inv.error);
  if (inv.running) return { ...PENDING };
  if (inv.output === undefined || inv.output === null) return { ...NO_RESPONSE };
  return null;
}

/** A stable plain-object view of an unknown value. */
export function record(v: unknown): Record<string, unknown> {
  return v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

export function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

export function num(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

/** `1.2 s`, `840 ms`. */
export function duration(ms: number): string {
  if (ms >= 60_000) return `${(ms / 60_000).toFixed(1)} min`;
  if (ms >= 10_000) return `${Math.round(ms / 1000)} s`;
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.round(ms)} ms`;
}

export type { VNode };
