/**
 * runtime_id redaction.
 *
 * A runtime id (`rt-` + UUID) is a capability: whoever holds it can run code in
 * that runtime or tear it down. So is a data channel's `access_key` (a run's
 * `output` writer): values under either key are masked the same way. Cards therefore never render one in full. Text
 * gets every id replaced by its short form (`rt-1a2b…`), and values handed to a
 * raw JSON view or a copy button go through {@link redactRaw} first.
 */

/** How many hex digits of the UUID the short form keeps. */
export const SHORT_HEX = 4;

const HEX = "[0-9A-Fa-f]";
const UUID = `${HEX}{8}-${HEX}{4}-${HEX}{4}-${HEX}{4}-${HEX}{12}`;

/** A complete runtime id, anchored. */
export const RUNTIME_ID_RE = new RegExp(`^[Rr][Tt]-${UUID}$`);

/** Keys whose values are secrets whatever they look like: runtime ids, and
 * the access key of a data channel (a run's `output` writer opens its
 * caller's stream with it). */
const SECRET_KEY_RE = /^(runtime[-_ ]?id|runtimeid|access[-_ ]?key|accesskey)$/i;

/** Secrets shorter than this are not searched for verbatim in text: a
 * caller-chosen `runtime_id: "a"` would otherwise blank every letter a. */
const MIN_VERBATIM_SECRET = 6;

/** Whether `key` names a runtime id (`runtime_id`, `runtimeId`, …). */
export function isSecretKey(key: string): boolean {
  return SECRET_KEY_RE.test(key);
}

/** Whether `s` is a complete runtime id. */
export function isRuntimeId(s: unknown): boolean {
  return typeof s === "string" && RUNTIME_ID_RE.test(s);
}

/**
 * The short, display-only form of an id: `rt-1a2b…` for a runtime id; for any
 * other secret, at most a third of it (and never more than 7 characters)
 * followed by an ellipsis.
 */
export function shortId(id: string): string {
  if (typeof id !== "string" || id.length === 0) return "…";
  // Already short: shortening is idempotent.
  if (id.length <= 8 && id.endsWith("…")) return id;
  if (isRuntimeId(id)) return `rt-${id.slice(3, 3 + SHORT_HEX).toLowerCase()}…`;
  const keep = Math.min(7, Math.floor(id.length / 3));
  return `${id.slice(0, keep)}…`;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** A text filter: runtime ids by shape, plus any extra secrets verbatim. */
export interface TextRedactor {
  (text: string): string;
  /** Everything the filter replaces (global, fresh per call of `matches`). */
  readonly source: string;
  /** The longest text one replacement can cover. */
  readonly longest: number;
  /** The secrets replaced verbatim (besides ids by shape). */
  readonly extras: readonly string[];
}

/**
 * Builds a text filter. Every `rt-<uuid>` is shortened; every extra secret
 * (values that arrived under a `runtime_id` key, whatever their shape) is
 * replaced by its short form too. One pass, one regular expression.
 */
export function makeRedactor(extraSecrets: Iterable<string> = []): TextRedactor {
  const extras = [
    ...new Set(
      [...extraSecrets].filter((s) => typeof s === "string" && s.length >= MIN_VERBATIM_SECRET && !isRuntimeId(s)),
    ),
  ]
    // Longest first, so a secret that contains another is replaced whole.
    .sort((a, b) => b.length - a.length);
  const source = [...extras.map(escapeRegExp), `[Rr][Tt]-${UUID}`].join("|");
  const re = new RegExp(source, "g");
  const f = (text: string): string => {
    if (typeof text !== "string") return "";
    re.lastIndex = 0;
    return text.replace(re, (m) => shortId(m));
  };
  return Object.assign(f, { source, longest: Math.max(39, extras[0]?.length ?? 0), extras: Object.freeze(extras) });
}

/**
 * Redacts only what survives a cut of `s` to `max` characters (head 60%, tail
 * 40%), so a huge string costs no more than its kept part. The cut points are
 * moved off any id or secret that straddles them, so a cut never leaves part
 * of one unredacted.
 */
export function redactClipped(s: string, max: number, redact: TextRedactor, what = "characters"): string {
  if (s.length <= max + 2 * redact.longest) return clip(redact(s), max, what);
  const head = Math.floor(max * 0.6);
  const tail = max - head;
  const headEnd = offMatch(s, head, redact);
  const tailStart = offMatch(s, s.length - tail, redact);
  const omitted = tailStart - headEnd;
  return `${redact(s.slice(0, headEnd))}\n[… ${omitted} ${what} omitted …]\n${redact(s.slice(tailStart))}`;
}

/** `pos`, or the start of the match that straddles it: where to cut `s` without cutting into an id or a secret. */
export function offMatch(s: string, pos: number, redact: TextRedactor): number {
  const from = Math.max(0, pos - redact.longest);
  const window = s.slice(from, pos + redact.longest);
  const re = new RegExp(redact.source, "g");
  for (let m = re.exec(window); m; m = re.exec(window)) {
    const a = from + m.index;
    const b = a + m[0].length;
    if (a < pos && pos < b) return a;
    if (m[0].length === 0) re.lastIndex++;
  }
  return pos;
}

/** The start of a runtime id still arriving at the end of a text: `rt-` and more of its UUID than its short form shows. */
const PARTIAL_ID_RE = new RegExp(`[Rr][Tt]-${HEX.replace("]", "-]")}{${SHORT_HEX + 1},35}$`);

/**
 * Where the end of `text` may be the start of an id or a secret still
 * arriving, longer than its short form shows (`text.length` when it cannot
 * be): a live view of text that is still growing shows only what comes
 * before, so no more of one shows than its short form before the whole can
 * be redacted.
 */
export function unfinishedAt(text: string, redact: TextRedactor): number {
  let at = text.length;
  for (const secret of redact.extras) {
    const shown = shortId(secret).length - 1;
    for (let k = Math.min(secret.length - 1, text.length); k > shown; k--) {
      if (text.endsWith(secret.slice(0, k))) {
        at = Math.min(at, text.length - k);
        break;
      }
    }
  }
  const id = PARTIAL_ID_RE.exec(text);
  return id ? Math.min(at, id.index) : at;
}

/** Shortens every runtime id in `text`. Never throws; non-strings give "". */
export const redactText: TextRedactor = makeRedactor();

/** Limits that keep {@link redactRaw}'s output (and its cost) bounded. */
export interface RedactLimits {
  /** Nesting below this depth is replaced by a marker. */
  maxDepth: number;
  /** Values visited in all; past it the rest is replaced by markers. */
  maxNodes: number;
  /** Characters kept of one string (head and tail around a marker). */
  maxString: number;
  /** Items kept of one array, keys kept of one object. */
  maxEntries: number;
  /** Characters of string content in the whole output. */
  maxTotalChars: number;
}

export const DEFAULT_LIMITS: RedactLimits = {
  maxDepth: 32,
  maxNodes: 20_000,
  maxString: 20_000,
  maxEntries: 500,
  maxTotalChars: 1_000_000,
};

/** JSON as redactRaw returns it: plain data only. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [k: string]: JsonValue };

/**
 * Cuts `s` to at most `max` characters, keeping the head (60%) and the tail
 * (40%) around a marker. Runs on already-redacted text, so a cut can only
 * split a short form, never expose an id.
 */
export function clip(s: string, max: number, what = "characters"): string {
  if (s.length <= max) return s;
  const head = Math.floor(max * 0.6);
  const tail = Math.max(0, max - head);
  const omitted = s.length - head - tail;
  return `${s.slice(0, head)}\n[… ${omitted} ${what} omitted …]\n${tail > 0 ? s.slice(s.length - tail) : ""}`;
}

function safeOwnKeys(o: object): string[] | null {
  try {
    return Object.keys(o);
  } catch {
    return null;
  }
}

/** Reads a data property without running getters (purity: no user code runs). */
function safeOwnValue(o: object, key: string): { ok: true; value: unknown } | { ok: false; marker: string } {
  try {
    const d = Object.getOwnPropertyDescriptor(o, key);
    // An array hole, or a key a proxy reports but cannot describe.
    if (!d) return { ok: true, value: undefined };
    if ("value" in d) return { ok: true, value: d.value };
    return { ok: false, marker: "[Getter]" };
  } catch {
    return { ok: false, marker: "[Unreadable]" };
  }
}

/** A data property found on `o` or its prototypes (getters are not run). */
function dataInChain(o: object, key: string): unknown {
  let cur: object | null = o;
  for (let hops = 0; cur && hops < 8; hops++) {
    const r = safeOwnValue(cur, key);
    if (r.ok && r.value !== undefined) return r.value;
    try {
      cur = Object.getPrototypeOf(cur) as object | null;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

function tagOf(v: object): string {
  try {
    return Object.prototype.toString.call(v).slice(8, -1);
  } catch {
    return "Object";
  }
}

/** Collects every string found under a runtime-id key (bounded walk). */
export function collectSecrets(value: unknown, limit = 2_000): string[] {
  const found: string[] = [];
  const seen = new Set<object>();
  const stack: unknown[] = [value];
  let budget = limit;
  while (stack.length > 0 && budget-- > 0) {
    const v = stack.pop();
    if (v === null || typeof v !== "object" || seen.has(v)) continue;
    seen.add(v);
    const keys = safeOwnKeys(v);
    if (!keys) continue;
    for (const k of keys.slice(0, 1_000)) {
      const r = safeOwnValue(v, k);
      if (!r.ok) continue;
      if (isSecretKey(k) && typeof r.value === "string") found.push(r.value);
      else if (r.value !== null && typeof r.value === "object") stack.push(r.value);
    }
  }
  return found;
}

/**
 * Deep-redacts a value for a raw JSON pane or a copy button.
 *
 * - every string (values and keys) has its runtime ids shortened, and so do
 *   values that arrived under a `runtime_id`-like key, whatever their shape
 *   (those are also searched for, verbatim, in every other string);
 * - cycles become `"[Circular]"`, depth, breadth, string length and the whole
 *   output are bounded (see {@link RedactLimits});
 * - non-JSON values become descriptive strings (`"[Function f]"`, `"12n"`, …);
 *   getters are never invoked and throwing proxies are survived;
 * - pure and total: never throws, never mutates its input, and the same
 *   input gives the same output; an output that needed no truncation is a
 *   fixed point (redacting it again changes nothing).
 */
export function redactRaw(value: unknown, limits: Partial<RedactLimits> = {}): JsonValue {
  try {
    return redactRawUnsafe(value, { ...DEFAULT_LIMITS, ...limits });
  } catch {
    return "[Unredactable value]";
  }
}

function redactRawUnsafe(root: unknown, lim: RedactLimits): JsonValue {
  const redact = makeRedactor(collectSecrets(root));
  let nodes = 0;
  let chars = 0;
  const ancestors = new Set<object>();

  const str = (s: string): string => {
    const room = lim.maxTotalChars - chars;
    if (room <= 0) return "[… budget exhausted …]";
    const out = redactClipped(s, Math.min(lim.maxString, Math.max(room, 40)), redact);
    chars += out.length;
    return out;
  };

  const walk = (v: unknown, depth: number, secret: boolean): JsonValue => {
    let out: JsonValue;
    try {
      out = walkUnsafe(v, depth, secret);
    } catch {
      // A revoked proxy, a throwing trap: this value only is lost.
      out = "[Unreadable]";
    }
    // Under a runtime_id key every string is shortened, markers included, so
    // that a second pass finds nothing left to change.
    return secret && typeof out === "string" ? shortId(out) : out;
  };

  const walkUnsafe = (v: unknown, depth: number, secret: boolean): JsonValue => {
    nodes += 1;
    if (nodes > lim.maxNodes) return "[… truncated: too many values …]";
    switch (typeof v) {
      case "string":
        return str(v);
      case "number":
        // -0 is 0 in JSON; keep the output a fixed point of a JSON round trip.
        return Number.isFinite(v) ? (v === 0 ? 0 : v) : String(v);
      case "boolean":
        return v;
      case "bigint":
        return `${v.toString()}n`;
      case "undefined":
        return null;
      case "symbol":
        return str(`[${v.toString()}]`);
      case "function":
        return str(`[Function${v.name ? ` ${v.name}` : ""}]`);
      default:
        break;
    }
    if (v === null) return null;
    const o = v as object;
    if (ancestors.has(o)) return "[Circular]";
    if (depth >= lim.maxDepth) return "[… truncated: too deep …]";
    const tag = tagOf(o);
    if (tag === "Date") {
      try {
        return str(Date.prototype.toISOString.call(o));
      } catch {
        return "[Invalid Date]";
      }
    }
    if (tag === "RegExp") {
      try {
        return str(RegExp.prototype.toString.call(o));
      } catch {
        return "[RegExp]";
      }
    }
    if (ArrayBuffer.isView(o) || tag === "ArrayBuffer" || tag === "SharedArrayBuffer") return `[${tag}]`;
    if (tag === "Map" || tag === "Set" || tag === "WeakMap" || tag === "WeakSet" || tag === "Promise") return `[${tag}]`;
    ancestors.add(o);
    try {
      if (Array.isArray(o)) {
        let len = 0;
        try {
          len = o.length;
        } catch {
          return "[Unreadable]";
        }
        const out: JsonValue[] = [];
        const n = Math.min(len, lim.maxEntries);
        for (let i = 0; i < n; i++) {
          const r = safeOwnValue(o, String(i));
          out.push(r.ok ? walk(r.value, depth + 1, secret) : secret ? shortId(r.marker) : r.marker);
        }
        if (len > n) out.push(`[… ${len - n} more items …]`);
        return out;
      }
      const keys = safeOwnKeys(o);
      if (keys === null) return "[Unreadable]";
      const out: { [k: string]: JsonValue } = {};
      if (tag === "Error") {
        // Errors carry their text in non-enumerable own properties.
        for (const k of ["name", "message"]) {
          const value = dataInChain(o, k);
          if (typeof value === "string") out[k] = str(value);
        }
      }
      const n = Math.min(keys.length, lim.maxEntries);
      for (let i = 0; i < n; i++) {
        const k = keys[i] as string;
        let rk = str(k);
        // Two ids with the same short form must not collapse into one key.
        if (Object.prototype.hasOwnProperty.call(out, rk)) {
          let j = 2;
          while (Object.prototype.hasOwnProperty.call(out, `${rk} (${j})`)) j++;
          rk = `${rk} (${j})`;
        }
        const r = safeOwnValue(o, k);
        const childSecret = secret || isSecretKey(k);
        out[rk] = r.ok ? walk(r.value, depth + 1, childSecret) : childSecret ? shortId(r.marker) : r.marker;
      }
      if (keys.length > n) {
        out["…"] = `[… ${keys.length - n} more keys …]`;
      }
      return out;
    } finally {
      ancestors.delete(o);
    }
  };

  return walk(root, 0, false);
}

/** Pretty JSON of {@link redactRaw}'s output: what raw panes and copy buttons use. */
export function redactedJson(value: unknown): string {
  try {
    return JSON.stringify(redactRaw(value), null, 2) ?? "null";
  } catch {
    return '"[Unredactable value]"';
  }
}
