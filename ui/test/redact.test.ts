/**
 * runtime_id redaction (src/redact.ts): redactRaw is total, leak-free, pure,
 * deterministic, bounded and idempotent on generated values and on hostile
 * ones; text redaction shortens every id and only ids, even across a cut.
 */
import { describe, expect, it } from "vitest";
import { DEFAULT_LIMITS, makeRedactor, redactClipped, redactRaw, redactText, shortId, unfinishedAt, type JsonValue } from "../src/redact";

// ─── a small seeded generator (no property-testing dependency) ──────────────

function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;
  return { next, int, pick };
}
type Rng = ReturnType<typeof rng>;

const hex = (r: Rng, n: number) => Array.from({ length: n }, () => "0123456789abcdef"[r.int(16)]).join("");
const uuid = (r: Rng) => `${hex(r, 8)}-${hex(r, 4)}-4${hex(r, 3)}-${"89ab"[r.int(4)]}${hex(r, 3)}-${hex(r, 12)}`;

interface Generated {
  value: unknown;
  /** Every full id placed in it, and every non-UUID secret (≥ 6 chars) put under a runtime_id key. */
  secrets: string[];
}

function generate(seed: number): Generated {
  const r = rng(seed);
  const secrets: string[] = [];
  const id = () => {
    const v = `rt-${uuid(r)}`;
    const form = r.pick([v, v, v.toUpperCase(), `RT-${v.slice(3)}`]);
    secrets.push(form);
    return form;
  };
  const text = (): string => {
    const parts: string[] = [];
    const n = r.int(6);
    for (let k = 0; k < n; k++) {
      parts.push(
        r.pick([
          () => id(),
          () => "plain words ",
          () => "é😀\u0000",
          () => `rt-${hex(r, 8)}`, // not an id
          () => hex(r, 5),
          () => "\n",
          () => "x".repeat(r.int(25) === 0 ? 30_000 + r.int(60_000) : r.int(40)),
        ])(),
      );
    }
    return parts.join(r.pick(["", " ", "-", "\n"]));
  };
  const ancestors: object[] = [];
  const node = (depth: number): unknown => {
    const leaf = depth > 5 || r.next() < 0.35;
    if (leaf) {
      return r.pick([
        () => text(),
        () => r.int(1000) - 500,
        () => r.pick([NaN, Infinity, -0, 1.5e300]),
        () => r.next() < 0.5,
        () => null,
        () => undefined,
        () => BigInt(r.int(1e9)) * 10n ** 20n,
        () => Symbol(text().slice(0, 50)),
        () => function namedFn() {},
        () => new Date(r.int(2e12)),
        () => new Date(NaN),
        () => /rt-[a-f]+/g,
        () => new Uint8Array(4),
        () => new Map([[1, 2]]),
        () => (ancestors.length ? r.pick(ancestors) : "no ancestor yet"), // a cycle
      ])();
    }
    if (r.next() < 0.4) {
      const arr: unknown[] = [];
      ancestors.push(arr);
      const n = r.int(8) === 0 && depth < 2 ? 600 + r.int(400) : r.int(6);
      // A long array holds leaves only, to keep generated values small.
      for (let k = 0; k < n; k++) arr.push(node(n > 100 ? 99 : depth + 1));
      if (r.next() < 0.1) arr.length += 3; // holes
      ancestors.pop();
      return arr;
    }
    const obj: Record<string, unknown> = r.next() < 0.1 ? Object.create(null) : {};
    ancestors.push(obj);
    const n = r.int(6);
    for (let k = 0; k < n; k++) {
      const key = r.pick([() => id(), () => "runtime_id", () => "runtimeId", () => `k${k}`, () => `key ${id()} ${hex(r, 4)}`])();
      if (/^runtime_?id$/i.test(key) && r.next() < 0.5) {
        const s = r.pick([() => id(), () => `secret-${hex(r, 10)}`, () => "abc"])();
        if (s.length >= 6) secrets.push(s);
        obj[key] = s;
      } else obj[key] = node(depth + 1);
    }
    if (r.next() < 0.1) {
      let calls = 0;
      Object.defineProperty(obj, "getter", { enumerable: true, get: () => ++calls });
    }
    ancestors.pop();
    return obj;
  };
  return { value: node(0), secrets };
}

/** A structural fingerprint that tolerates cycles and never runs getters. */
function fingerprint(v: unknown, seen = new Map<object, number>()): string {
  if (v === null || (typeof v !== "object" && typeof v !== "function")) {
    return typeof v === "symbol" ? `sym(${v.description})` : typeof v === "bigint" ? `${v}n` : `${typeof v}:${String(v)}`;
  }
  if (typeof v === "function") return `fn:${v.name}`;
  if (seen.has(v)) return `@${seen.get(v)}`;
  seen.set(v, seen.size);
  if (v instanceof Date) return `date:${v.getTime()}`;
  const parts = Reflect.ownKeys(v).map((k) => {
    const d = Object.getOwnPropertyDescriptor(v, k) as PropertyDescriptor;
    return `${String(k)}=${"value" in d ? fingerprint(d.value, seen) : "accessor"}`;
  });
  return `${Object.getPrototypeOf(v) === null ? "null-proto" : v.constructor?.name}{${parts.join(",")}}`;
}

const TRUNCATION = /\[… |\[Circular\]|budget exhausted/;

function hasTruncation(v: JsonValue): boolean {
  return TRUNCATION.test(JSON.stringify(v));
}

function assertClean(out: JsonValue, secrets: readonly string[]): void {
  const json = JSON.stringify(out);
  expect(json).not.toMatch(/rt-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i);
  for (const s of secrets) {
    expect(json.includes(s), `leaked ${s}`).toBe(false);
    const bare = s.slice(3);
    if (/^[0-9a-f-]{36}$/i.test(bare)) expect(json.toLowerCase().includes(bare.toLowerCase()), `leaked ${bare}`).toBe(false);
  }
}

// ─── properties ─────────────────────────────────────────────────────────────

describe("redactRaw properties (300 generated values)", () => {
  const cases = Array.from({ length: 300 }, (_, seed) => seed + 1);

  it("is total, leak-free, pure, deterministic and bounded", () => {
    for (const seed of cases) {
      const { value, secrets } = generate(seed);
      const before = fingerprint(value);
      let out: JsonValue = null;
      expect(() => {
        out = redactRaw(value);
      }, `seed ${seed}`).not.toThrow();
      // Plain JSON data: survives a round trip unchanged.
      const json = JSON.stringify(out);
      expect(JSON.parse(json ?? "null"), `seed ${seed}`).toEqual(out);
      assertClean(out, secrets);
      expect(fingerprint(value), `seed ${seed} mutated its input`).toBe(before);
      expect(redactRaw(value), `seed ${seed}`).toEqual(out);
      expect((json ?? "").length, `seed ${seed}`).toBeLessThan(DEFAULT_LIMITS.maxTotalChars * 1.2 + 2_000_000);
      if (!hasTruncation(out)) expect(redactRaw(out), `seed ${seed} is not a fixed point`).toEqual(out);
    }
  });
});

describe("redactRaw cases", () => {
  const A = "rt-1a2b3c4d-0000-4000-8000-000000000001";
  const B = "rt-1a2b9999-0000-4000-8000-000000000002";

  it("shortens ids in values and keys, and keeps colliding keys apart", () => {
    const out = redactRaw({ [A]: 1, [B]: 2, list: [A], note: `held by ${A}` }) as Record<string, unknown>;
    expect(out).toEqual({ "rt-1a2b…": 1, "rt-1a2b… (2)": 2, list: ["rt-1a2b…"], note: "held by rt-1a2b…" });
  });

  it("masks a run's output writer key, and finds it verbatim elsewhere", () => {
    const key = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    const out = redactRaw({ input: { code: "print(1)", output: { channel_id: "ch-1", access_key: key, direction: "write" } }, note: `key ${key}` });
    expect(JSON.stringify(out)).not.toContain(key);
    expect(out).toEqual({ input: { code: "print(1)", output: { channel_id: "ch-1", access_key: "0f1e2d3…", direction: "write" } }, note: "key 0f1e2d3…" });
  });

  it("masks whatever sits under a runtime_id key, and finds it verbatim elsewhere", () => {
    const out = redactRaw({ input: { runtime_id: "my-own-token-123" }, error: "no runtime my-own-token-123 here" });
    expect(JSON.stringify(out)).not.toContain("my-own-token-123");
    expect(out).toEqual({ input: { runtime_id: "my-ow…" }, error: "no runtime my-ow… here" });
  });

  it("marks cycles, and renders shared (acyclic) references twice", () => {
    const shared = { n: 1 };
    const o: Record<string, unknown> = { a: shared, b: shared };
    o.self = o;
    expect(redactRaw(o)).toEqual({ a: { n: 1 }, b: { n: 1 }, self: "[Circular]" });
  });

  it("survives deep nesting without recursing past the limit", () => {
    let deep: unknown = A;
    for (let k = 0; k < 100_000; k++) deep = { next: deep };
    const out = JSON.stringify(redactRaw(deep));
    expect(out).toContain("too deep");
    expect(out.length).toBeLessThan(1_000);
  });

  it("bounds huge strings, arrays and objects", () => {
    const big = `${A} ${"y".repeat(5_000_000)} ${A}`;
    const s = redactRaw(big) as string;
    expect(s.length).toBeLessThanOrEqual(DEFAULT_LIMITS.maxString + 100);
    expect(s.startsWith("rt-1a2b… yyy")).toBe(true);
    expect(s.endsWith("yyy rt-1a2b…")).toBe(true);
    const arr = redactRaw(new Array(1e6).fill(A)) as unknown[];
    expect(arr.length).toBe(DEFAULT_LIMITS.maxEntries + 1);
    expect(arr[arr.length - 1]).toMatch(/more items/);
    const sparse = redactRaw(new Array(2 ** 31)) as unknown[];
    expect(sparse.length).toBe(DEFAULT_LIMITS.maxEntries + 1);
    const wide = Object.fromEntries(Array.from({ length: 5_000 }, (_, k) => [`k${k}`, A]));
    expect(Object.keys(redactRaw(wide) as object).length).toBe(DEFAULT_LIMITS.maxEntries + 1);
    const many = Array.from({ length: 400 }, () => Array.from({ length: 400 }, () => "z".repeat(100)));
    const out = JSON.stringify(redactRaw(many));
    expect(out.length).toBeLessThan(3_000_000);
    expect(out).toContain("too many values");
  });

  it("never runs getters or user methods, and survives hostile objects", () => {
    let calls = 0;
    const tricky = {
      get boom(): never {
        calls++;
        throw new Error(A);
      },
      toJSON() {
        calls++;
        return A;
      },
    };
    const hostile = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error("no keys");
        },
        get() {
          throw new Error("no get");
        },
        getOwnPropertyDescriptor() {
          throw new Error("no descriptor");
        },
      },
    );
    const half = new Proxy({ a: 1 }, { getOwnPropertyDescriptor() {
      throw new Error(A);
    } });
    const revocable = Proxy.revocable({}, {});
    revocable.revoke();
    const out = redactRaw({ tricky, hostile, half, revoked: revocable.proxy, frozen: Object.freeze({ id: A }), err: new TypeError(`bad ${A}`) });
    expect(calls).toBe(0);
    expect(out).toMatchObject({
      tricky: { boom: "[Getter]", toJSON: "[Function toJSON]" },
      hostile: "[Unreadable]",
      half: "[Unreadable]",
      frozen: { id: "rt-1a2b…" },
      err: { name: "TypeError", message: "bad rt-1a2b…" },
    });
    expect(JSON.stringify(out)).not.toContain(A);
  });

  it("returns plain data for every primitive", () => {
    expect(redactRaw(undefined)).toBe(null);
    expect(redactRaw(NaN)).toBe("NaN");
    expect(redactRaw(-Infinity)).toBe("-Infinity");
    expect(redactRaw(12n)).toBe("12n");
    expect(redactRaw(Symbol(A))).toBe("[Symbol(rt-1a2b…)]");
    expect(redactRaw(A)).toBe("rt-1a2b…");
    expect(redactRaw(new Date(0))).toBe("1970-01-01T00:00:00.000Z");
  });
});

describe("redactClipped", () => {
  it("never leaves part of an id at a cut, wherever the id sits", () => {
    const id = "rt-0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
    const red = makeRedactor(["a-caller-secret-of-some-length"]);
    const max = 1_000;
    const head = Math.floor(max * 0.6);
    for (const secret of [id, "a-caller-secret-of-some-length"]) {
      for (let shift = -45; shift <= 45; shift++) {
        const len = 50_000;
        const chars = new Array<string>(len).fill(".");
        const put = (at: number) => chars.splice(at, secret.length, ...secret);
        put(head + shift); // around the head cut
        put(len - (max - head) + shift); // around the tail cut
        const out = redactClipped(chars.join("").slice(0, len), max, red);
        expect(out.length).toBeLessThan(max + 100);
        // No run of 8 characters of the secret survives (a short form keeps 7).
        for (let k = 0; k + 8 <= secret.length; k++) {
          const piece = secret.slice(k, k + 8);
          expect(out.includes(piece), `shift ${shift}: ${piece}`).toBe(false);
        }
      }
    }
  });
});

describe("unfinishedAt (a live view holds back what may be an id or a secret still arriving)", () => {
  const KEY = "5b0e7c1d-93a4-4f28-b6d2-0e8c41a9f7d3";
  const redact = makeRedactor([KEY]);
  const cases: [string, string, number][] = [
    ["plain text", "step 1: done\n", 13],
    ["half a secret", `key ${KEY.slice(0, 9)}`, 4],
    ["no more of a secret than its short form", `total ${KEY.slice(0, 7)}`, 13],
    ["one character more", `total ${KEY.slice(0, 8)}`, 6],
    ["a whole secret", `key ${KEY}`, 4 + KEY.length],
    ["half a runtime id", "kept rt-10f3bc08-c2", 5],
    ["a whole runtime id", "kept rt-10f3bc08-c2e8-41d9-8d66-5efb6e02ad86", 44],
    ["no more of an id than its short form", "start rt-10f3", 13],
  ];
  for (const [what, text, at] of cases) {
    it(what, () => expect(unfinishedAt(text, redact)).toBe(at));
  }
});

describe("redactText and shortId", () => {
  it("shortens every id, any case, and leaves look-alikes", () => {
    const id = "rt-ABCDEF01-2345-4678-9abc-def012345678";
    expect(redactText(`a ${id}b rt-1234 rt-${"0".repeat(36)}`)).toBe("a rt-abcd…b rt-1234 rt-" + "0".repeat(36));
    expect(redactText(`x${id.toLowerCase()}y`)).toBe("xrt-abcd…y");
    expect(redactText(42 as unknown as string)).toBe("");
  });

  it("is idempotent", () => {
    for (const s of ["rt-1a2b…", "abc", "rt-1a2b3c4d-0000-4000-8000-000000000001", "a-long-secret-value"]) {
      expect(shortId(shortId(s))).toBe(shortId(s));
    }
    expect(shortId("")).toBe("…");
  });
});
