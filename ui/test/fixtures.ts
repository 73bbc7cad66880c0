/**
 * The UI fixtures (fixtures/ui/*.json: calls recorded through the hermetic
 * bench, and a few written by hand) and what the tests derive from them:
 * the console message of a call, in its chat or its trace shape, and the
 * leak checks (no full runtime id, no secret of the call).
 */
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export interface Fixture {
  name: string;
  about: string;
  recorded: boolean;
  function_id: string;
  input?: unknown;
  output?: unknown;
  error?: unknown;
}

/**
 * How a console carries a call (see src/message.ts): `chat` wraps an answer
 * in the harness envelope and an error as `{error: {kind, message}}`;
 * `trace` carries the bare answer and an error as the exception string.
 */
export type MessageShape = "chat" | "trace";

export interface Message {
  id: string;
  role: "function-trigger";
  functionId: string;
  input: unknown;
  output?: unknown;
  durationMs?: number;
  running?: boolean;
  createdAt: number;
}

function errorText(error: unknown): string {
  if (typeof error === "string") return error;
  const o = (error ?? {}) as { message?: unknown };
  return typeof o.message === "string" ? o.message : JSON.stringify(error);
}

/** The console message of fixture `f`: in flight when it has neither output nor error. */
export function toMessage(f: Fixture, shape: MessageShape = "chat"): Message {
  const base: Message = { id: `${f.name}-${shape}`, role: "function-trigger", functionId: f.function_id, input: f.input, createdAt: Date.UTC(2026, 11, 1, 12) };
  const duration = (f.output as { duration_ms?: unknown } | undefined)?.duration_ms;
  const durationMs = typeof duration === "number" ? duration + 4 : 12;
  if (f.error !== undefined) {
    const output = shape === "chat" ? { error: { kind: "function_error", message: errorText(f.error) } } : { error: `Error: ${errorText(f.error)}` };
    return { ...base, output, durationMs };
  }
  if (f.output === undefined) return { ...base, running: true };
  const output = shape === "chat" ? { content: [{ type: "text", text: JSON.stringify(f.output) }], details: f.output } : f.output;
  return { ...base, output, durationMs };
}

// A string, not a URL object: DOM environments replace the global URL.
export const FIXTURE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../../fixtures/ui");

export function loadFixtures(): Fixture[] {
  return readdirSync(FIXTURE_DIR)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => JSON.parse(readFileSync(join(FIXTURE_DIR, f), "utf8")) as Fixture);
}

export function fixture(name: string): Fixture {
  const f = loadFixtures().find((x) => x.name === name);
  if (!f) throw new Error(`no fixture ${name}`);
  return f;
}

/** A full runtime id, anywhere, any case. */
export const FULL_ID = /rt-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
/** The UUID part alone: its presence is a leak too. */
export const ANY_UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;

/** Every secret a fixture carries: ids by shape, and values under runtime_id keys. */
export function secretsOf(value: unknown): string[] {
  const text = JSON.stringify(value);
  const found = new Set<string>(text.match(new RegExp(FULL_ID.source, "gi")) ?? []);
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === "object") {
      for (const [k, x] of Object.entries(v)) {
        if (k === "runtime_id" && typeof x === "string") found.add(x);
        walk(x);
      }
    }
  };
  walk(value);
  return [...found];
}

/** Asserts `out` holds no full id and no secret of `source`. */
export function assertNoLeak(out: string, source: unknown, where: string): void {
  const m = FULL_ID.exec(out) ?? ANY_UUID.exec(out);
  if (m) throw new Error(`${where}: full runtime id or UUID leaked: ${m[0]}`);
  for (const s of secretsOf(source)) {
    for (const form of [s, s.toLowerCase(), s.toUpperCase(), s.slice(3)]) {
      if (form.length >= 6 && out.includes(form)) throw new Error(`${where}: secret leaked: ${form}`);
    }
  }
}
