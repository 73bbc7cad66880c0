/**
 * The tokenizer (src/highlight.ts): it never loses a character, colours what
 * each language calls keywords, strings, numbers and comments, tells whether
 * a source defines `handler`, and guesses a language.
 */
import { describe, expect, it } from "vitest";
import { definesHandler, guessLang, toLines, tokenize } from "../src/highlight";
import { loadFixtures } from "./fixtures";

const types = (src: string, lang: "node" | "python") => tokenize(src, lang).filter((t) => t.type !== "ws").map((t) => `${t.type}:${t.text}`);

describe("tokenize", () => {
  it("never loses a character, on every fixture source and on junk", () => {
    const sources: string[] = [];
    for (const f of loadFixtures()) {
      const i = (f.input ?? {}) as Record<string, unknown>;
      for (const k of ["code", "source"]) if (typeof i[k] === "string") sources.push(i[k] as string);
    }
    sources.push("", "'unterminated", '"""never closed', "`a${b`c${d}`}e", "/* open", "/[/]/g.test(x) / 2", "x = 1_000.5e-3j", "\u0000\uffff😀", "#!/usr/bin/env node\n1");
    let seed = 7;
    for (let n = 0; n < 200; n++) {
      let s = "";
      for (let k = 0; k < 60; k++) {
        seed = (seed * 1103515245 + 12345) >>> 0;
        s += "ab1 .'\"`/\\*#{}()$\n@=:"[seed % 22];
      }
      sources.push(s);
    }
    for (const src of sources) {
      for (const lang of ["node", "python"] as const) {
        const toks = tokenize(src, lang);
        expect(toks.map((t) => t.text).join("")).toBe(src);
        expect(toLines(toks).map((l) => l.map((t) => t.text).join("")).join("\n")).toBe(src);
      }
    }
  });

  it("colours JavaScript", () => {
    expect(types("const re = /a\\/b[/]/gi; // done", "node")).toEqual(["kw:const", "id:re", "op:=", "re:/a\\/b[/]/gi", "op:;", "com:// done"]);
    expect(types("a / b / c", "node")).toEqual(["id:a", "op:/", "id:b", "op:/", "id:c"]);
    expect(types("export async function handler(p) { return `x${p.n}` }", "node")).toEqual([
      "kw:export", "kw:async", "kw:function", "fn:handler", "op:(", "id:p", "op:)", "op:{", "kw:return", "str:`x${p.n}`", "op:}",
    ]);
    expect(types("console.log(0x1fn, 1e3, null)", "node")).toEqual(["bi:console", "op:.", "fn:log", "op:(", "num:0x1fn", "op:,", "num:1e3", "op:,", "lit:null", "op:)"]);
  });

  it("colours Python", () => {
    expect(types('@cache\ndef f(x):\n    """doc\n    more"""\n    return rb"\\x00" if x else None  # c', "python")).toEqual([
      "dec:@cache", "kw:def", "fn:f", "op:(", "id:x", "op:)", "op::", 'str:"""doc\n    more"""', "kw:return", 'str:rb"\\x00"', "kw:if", "id:x", "kw:else", "lit:None", "com:# c",
    ]);
    expect(types("print(f'{a}', 3j)", "python")).toEqual(["bi:print", "op:(", "str:f'{a}'", "op:,", "num:3j", "op:)"]);
  });
});

describe("definesHandler", () => {
  it.each([
    ["export function handler(payload) {}", "node", true],
    ["export async function handler(p) {}", "node", true],
    ["export const handler = (p) => p;", "node", true],
    ["function handler(p) {}\nexport { handler };", "node", true],
    ["const h = 1; export { h as x, handler };", "node", true],
    ["module.exports.handler = () => 1", "node", true],
    ["exports.handler = () => 1", "node", true],
    ["// export function handler\nexport function handle() {}", "node", false],
    ["const s = 'handler';", "node", false],
    ["handler(1)", "node", false],
    ["def handler(payload):\n    return 1", "python", true],
    ["async def handler(payload):\n    return 1", "python", true],
    ["handler = lambda p: p", "python", true],
    ["from impl import handler", "python", true],
    ["from impl import run as handler", "python", true],
    ["# def handler(payload):\ndef greet(n): pass", "python", false],
    ["x = 'def handler(p):'", "python", false],
    ["def f():\n    handler = 1", "python", false],
  ])("%s (%s) → %s", (src, lang, want) => {
    expect(definesHandler(src, lang)).toBe(want);
  });
});

describe("guessLang", () => {
  it("tells the fixture languages apart", () => {
    for (const f of loadFixtures()) {
      const i = (f.input ?? {}) as Record<string, unknown>;
      const src = (i.code ?? i.source) as string | undefined;
      if (typeof src === "string" && typeof i.lang === "string") expect(guessLang(src), f.name).toBe(i.lang);
    }
  });
});
