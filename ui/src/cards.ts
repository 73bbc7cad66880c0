/**
 * The card trees of `run`, `register_function` and `teardown`: each turns
 * an {@link Invocation} into a tree; the frame, the redaction and the back
 * ends are shared (`list_runtimes` is in `inventory-card.ts`).
 */

import { definesHandler, guessLang } from "./highlight";
import {
  badge,
  callout,
  codeBlock,
  duration,
  fieldRow,
  frame,
  mono,
  num,
  record,
  section,
  str,
  terminal,
  UI_NAME,
  type Invocation,
  type Tone,
  type Verdict,
  unsettledVerdict,
} from "./frame";
import { renderInventory } from "./inventory-card";
import { liveSection, outputRefOf } from "./live";
import { redactedJson, type TextRedactor } from "./redact";
import { h, secretChip, type Child, type VElement } from "./vnode";

export type CardKind = "run" | "register_function" | "teardown" | "list_runtimes";

/** What a renderer needs besides the invocation. */
export interface CardContext {
  /** The card's text filter (runtime ids by shape plus this call's own ids). */
  redact: TextRedactor;
}

function langBadge(lang: string | undefined): Child {
  if (lang === "node") return badge("node", "node");
  if (lang === "python") return badge("python", "python");
  return null;
}

function lineCount(src: string | undefined): string {
  if (!src) return "empty";
  const n = src.split("\n").length - (src.endsWith("\n") ? 1 : 0);
  return n === 1 ? "1 line" : `${n} lines`;
}

function hasOutput(inv: Invocation): boolean {
  return inv.output !== undefined && inv.output !== null && (inv.error === undefined || inv.error === null);
}

// ─── run ────────────────────────────────────────────────────────────────────

export function renderRun(inv: Invocation, ctx: CardContext): VElement {
  const input = record(inv.input);
  const output = record(inv.output);
  const code = str(input.code);
  const lang = str(input.lang);
  const keep = input.keep === true;
  const inRuntime = str(input.runtime_id);
  const outRuntime = str(output.runtime_id);
  const runtime = outRuntime ?? inRuntime;

  // A session's state: what the answer says, else what the request asked.
  const session = str(output.session) ?? (input.session === true ? "asked" : undefined);

  const badges: Child[] = [
    langBadge(lang) ?? (inRuntime ? badge("kept runtime", "plain") : null),
    inRuntime ? badge("reuse", "mode") : keep ? badge("keep", "mode") : badge("one-shot", "mode"),
    session ? badge(session === "asked" ? "session" : `session ${session}`, "mode") : null,
    num(input.timeout_ms) ? badge(`timeout ${duration(num(input.timeout_ms) as number)}`, "plain") : null,
  ];

  let verdict: Verdict;
  let streamTone: Tone = "neutral";
  const unsettled = unsettledVerdict(inv);
  if (unsettled) {
    verdict = unsettled;
  } else {
    const exit = num(output.exit_code);
    const ms = num(output.duration_ms);
    const ok = output.success === true && (exit === undefined || exit === 0);
    const facts: Child[] = [exit !== undefined ? `exit ${exit}` : null, ms !== undefined ? duration(ms) : null];
    if (ok) {
      verdict = { tone: "ok", headline: "Succeeded", facts };
    } else {
      streamTone = "warn";
      verdict = {
        tone: "warn",
        headline: exit !== undefined && exit !== 0 ? `Exited with code ${exit}` : "Script failed",
        facts: [ms !== undefined ? duration(ms) : null],
        detail: "The script failed, the call did not: stdout, stderr and the exit code are its answer.",
      };
    }
    if (keep && !inRuntime && outRuntime) {
      verdict.detail = "The runtime stays up: pass its id to run again in it, or to teardown when done.";
    }
    if (keep && !inRuntime && !outRuntime) {
      verdict.detail = h(
        "span",
        null,
        verdict.detail ? h("span", null, verdict.detail, " ") : null,
        "Nothing was kept: only a keep run that succeeds leaves a runtime behind.",
      );
    }
  }
  if (session === "reset" && !unsettled) {
    verdict.detail = h(
      "span",
      null,
      verdict.detail ? h("span", null, verdict.detail, " ") : null,
      "The session's interpreter was lost (a timeout or an exit): this run started a fresh one on the same files, so earlier globals are gone.",
    );
  }
  if (runtime) {
    verdict.aside = h("span", { class: "scr-runtime" }, h("span", { class: "scr-runtime-label" }, inRuntime ? "in runtime" : "kept runtime"), secretChip(runtime));
  }

  const sections: Child[] = [];
  // Its output as it is written, while it runs (the live view mounts here).
  if (inv.running && outputRefOf(inv.input)) sections.push(liveSection());
  if ("result" in output) {
    const value = output.result;
    sections.push(
      section(
        "Value",
        null,
        value === null
          ? h(
              "p",
              { class: "scr-null" },
              mono("null"),
              " — ",
              lang === "python" ? ["python code is a module: assign ", mono("result = …"), " to return a value."] : ["node code is a function body: ", mono("return …"), " a value."],
            )
          : h("pre", { class: "scr-value" }, redactedJson(value)),
      ),
    );
  }
  if (code !== undefined) {
    const shownLang = lang ?? guessLang(code);
    sections.push(section("Source", [lang ? lang : `${shownLang} (guessed)`, " · ", lineCount(code)], codeBlock(code, shownLang, ctx.redact)));
  }
  if (hasOutput(inv)) {
    const out = terminal("stdout", output.stdout, "neutral", ctx.redact);
    const err = terminal("stderr", output.stderr, streamTone, ctx.redact);
    sections.push(section("Output", null, out || err ? [out, err] : h("p", { class: "scr-empty" }, "No output on stdout or stderr.")));
  }

  return frame({ fn: "run", title: "run", badges, verdict, sections });
}

// ─── register_function ──────────────────────────────────────────────────────

/** `app::` for `app::greet`; null when the id has no namespace. */
export function namespaceOf(functionId: string | undefined): string | null {
  if (!functionId) return null;
  const at = functionId.indexOf("::");
  return at > 0 ? `${functionId.slice(0, at)}::` : null;
}

export function renderRegister(inv: Invocation, ctx: CardContext): VElement {
  const input = record(inv.input);
  const output = record(inv.output);
  const fid = str(output.function_id) ?? str(input.function_id);
  const lang = str(input.lang);
  const source = str(input.source);
  const ns = namespaceOf(fid);

  let verdict: Verdict;
  const unsettled = unsettledVerdict(inv);
  if (unsettled) verdict = unsettled;
  else if (output.registered === true) verdict = { tone: "ok", headline: "Registered", facts: [fid ? mono(fid) : null] };
  else verdict = { tone: "warn", headline: "Not registered", facts: [fid ? mono(fid) : null] };

  const sections: Child[] = [];
  sections.push(
    h(
      "div",
      { class: "scr-fields" },
      fieldRow("namespace", ns ? mono(ns) : h("em", null, "none: the id has no `::`"), ns ? [`one runtime per language backs every id in `, mono(ns)] : null),
      fieldRow("function", fid ? mono(fid) : h("em", null, "missing")),
      str(input.description) ? fieldRow("description", str(input.description)) : null,
    ),
  );
  if (source !== undefined) {
    if (!definesHandler(source, lang)) {
      sections.push(
        callout(
          "warn",
          "No handler is defined",
          h(
            "p",
            null,
            "register_function calls ",
            mono("handler(payload)"),
            " and refuses a source that does not define one. ",
            lang === "python" ? ["Define ", mono("def handler(payload):"), " at module level."] : ["Export it: ", mono("export function handler(payload) { … }"), "."],
          ),
        ),
      );
    } else if (lang === "python" && /(^|\n)\s*async\s+def\s+handler\b/.test(source)) {
      sections.push(callout("warn", "async handler", h("p", null, mono("async def handler"), " is refused on python; define a plain ", mono("def handler(payload):"), ".")));
    }
    sections.push(section("Source", [lang ?? "", lang ? " · " : "", lineCount(source)], codeBlock(source, lang, ctx.redact)));
  }
  return frame({ fn: "register_function", title: "register_function", badges: [langBadge(lang)], verdict, sections });
}

// ─── teardown ───────────────────────────────────────────────────────────────

export function renderTeardown(inv: Invocation, _ctx: CardContext): VElement {
  const input = record(inv.input);
  const output = record(inv.output);
  const runtime = str(output.runtime_id) ?? str(input.runtime_id);
  const ns = str(output.namespace) ?? str(input.namespace);
  const nsShown = ns ? (ns.endsWith("::") ? ns : `${ns}::`) : undefined;
  const unregistered = Array.isArray(output.unregistered) ? output.unregistered.filter((x): x is string => typeof x === "string") : [];

  let verdict: Verdict;
  const unsettled = unsettledVerdict(inv);
  if (unsettled) verdict = unsettled;
  else if (output.torn_down === true) {
    verdict = {
      tone: "ok",
      headline: "Torn down",
      facts: [unregistered.length === 1 ? "1 function unregistered" : `${unregistered.length} functions unregistered`],
    };
  } else verdict = { tone: "warn", headline: "Nothing was torn down" };

  const done = output.torn_down === true && !inv.error;
  const target: Child = runtime
    ? fieldRow("runtime", secretChip(runtime), done ? "this id no longer addresses anything" : null)
    : nsShown
      ? fieldRow("namespace", mono(nsShown), done ? "every runtime that backed it, one per language, is gone" : null)
      : fieldRow("target", h("em", null, "neither runtime_id nor namespace"));

  const sections: Child[] = [h("div", { class: "scr-fields" }, target)];
  if (hasOutput(inv) && !inv.error) {
    sections.push(
      section(
        "Stopped resolving",
        unregistered.length ? String(unregistered.length) : null,
        unregistered.length
          ? h(
              "ul",
              { class: "scr-gone" },
              unregistered.map((id) => h("li", null, h("span", { class: "scr-gone-mark", "aria-hidden": "true" }, "⊘"), mono(id))),
            )
          : h("p", { class: "scr-empty" }, runtime ? "No function ids: this runtime had published none, so nothing on the bus changed." : "No function ids were registered under it."),
      ),
    );
  }
  return frame({
    fn: "teardown",
    title: "teardown",
    badges: [runtime ? badge("by runtime", "mode") : nsShown ? badge("by namespace", "mode") : null],
    verdict,
    sections,
  });
}

export const RENDERERS: Record<CardKind, (inv: Invocation, ctx: CardContext) => VElement> = {
  run: renderRun,
  register_function: renderRegister,
  teardown: renderTeardown,
  list_runtimes: renderInventory,
};

/** The operations that have a card, in registration order. */
export const KINDS: readonly CardKind[] = ["run", "register_function", "teardown", "list_runtimes"];

/** Which card a function id takes (`sandbox-code-runner::run` → run), or null. */
export function kindOf(functionId: string | undefined): CardKind | null {
  if (typeof functionId !== "string" || !functionId.startsWith(`${UI_NAME}::`)) return null;
  const op = functionId.slice(UI_NAME.length + 2);
  return (KINDS as readonly string[]).includes(op) ? (op as CardKind) : null;
}
