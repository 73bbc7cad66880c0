/**
 * A small, forgiving tokenizer for JavaScript and Python: enough to colour a
 * card's source and to tell whether it defines `handler`. It never throws and
 * never loses a character: the tokens always concatenate back to the input.
 */

export type Lang = "node" | "python";

export type TokenType =
  | "kw" // keyword
  | "lit" // true/false/null/None/…
  | "str" // string, template, bytes
  | "num" // number
  | "com" // comment
  | "re" // regular expression literal (JS)
  | "fn" // a called or defined function name
  | "cls" // a class name after `class`
  | "bi" // builtin global (console, print, iii, …)
  | "dec" // decorator (Python)
  | "id" // other identifier
  | "op" // operator or punctuation
  | "ws"; // whitespace

export interface Token {
  readonly type: TokenType;
  readonly text: string;
}

const JS_KEYWORDS = new Set(
  (
    "async await break case catch class const continue debugger default delete do else export extends " +
    "finally for from function if import in instanceof let new of return static super switch this throw " +
    "try typeof var void while with yield as get set"
  ).split(" "),
);
const JS_LITERALS = new Set(["true", "false", "null", "undefined", "NaN", "Infinity"]);
const JS_BUILTINS = new Set(
  (
    "console iii process globalThis window document JSON Math Object Array String Number Boolean Promise " +
    "Map Set Date Error TypeError RegExp Symbol BigInt require module exports Buffer fetch setTimeout"
  ).split(" "),
);

const PY_KEYWORDS = new Set(
  (
    "and as assert async await break class continue def del elif else except finally for from global if " +
    "import in is lambda nonlocal not or pass raise return try while with yield match case"
  ).split(" "),
);
const PY_LITERALS = new Set(["True", "False", "None", "Ellipsis", "NotImplemented"]);
const PY_BUILTINS = new Set(
  (
    "print len range str int float bool dict list set tuple open iii sum min max abs sorted enumerate zip " +
    "map filter isinstance type repr super object Exception ValueError KeyError TypeError RuntimeError " +
    "json os sys self cls"
  ).split(" "),
);

const IDENT = /[A-Za-z_$\u00AA-\uFFFF][\w$\u00AA-\uFFFF]*/y;
const NUMBER =
  /(?:0[xX][\da-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?)[njJ]?/y;
const WS = /\s+/y;
const OP = /(?:=>|\*\*=?|\.\.\.|===|!==|==|!=|<=|>=|&&|\|\||\?\?|\?\.|\/\/=?|<<|>>>?|->|[-+*/%&|^~<>!=?:;,.(){}[\]@])=?/y;

function matchAt(re: RegExp, src: string, i: number): string | null {
  re.lastIndex = i;
  const m = re.exec(src);
  return m && m.index === i && m[0].length > 0 ? m[0] : null;
}

/** Index just past a quoted string starting at `i` (quote `q`), stopping at a newline unless `multiline`. */
function scanQuoted(src: string, i: number, q: string, multiline: boolean): number {
  let j = i + q.length;
  while (j < src.length) {
    if (src.startsWith(q, j)) return j + q.length;
    const c = src[j];
    if (c === "\\") {
      j += 2;
      continue;
    }
    if (c === "\n" && !multiline) return j;
    j++;
  }
  return src.length;
}

/** Index just past a JS template literal starting at `i`, with `${…}` nesting. */
function scanTemplate(src: string, i: number): number {
  let j = i + 1;
  while (j < src.length) {
    const c = src[j];
    if (c === "\\") {
      j += 2;
      continue;
    }
    if (c === "`") return j + 1;
    if (c === "$" && src[j + 1] === "{") {
      let depth = 1;
      j += 2;
      while (j < src.length && depth > 0) {
        const d = src[j];
        if (d === "{") depth++;
        else if (d === "}") depth--;
        else if (d === "`") {
          j = scanTemplate(src, j);
          continue;
        } else if (d === "'" || d === '"') {
          j = scanQuoted(src, j, d, false);
          continue;
        }
        j++;
      }
      continue;
    }
    j++;
  }
  return src.length;
}

/** Index just past a JS regex literal at `i`, or -1 when it is not one. */
function scanRegex(src: string, i: number): number {
  let j = i + 1;
  let inClass = false;
  while (j < src.length) {
    const c = src[j];
    if (c === "\n") return -1;
    if (c === "\\") {
      j += 2;
      continue;
    }
    if (c === "[") inClass = true;
    else if (c === "]") inClass = false;
    else if (c === "/" && !inClass) {
      j++;
      while (j < src.length && /[a-z]/.test(src[j] as string)) j++;
      return j;
    }
    j++;
  }
  return -1;
}

function nextNonSpace(src: string, i: number): string {
  for (let j = i; j < src.length; j++) {
    const c = src[j] as string;
    if (c !== " " && c !== "\t") return c;
  }
  return "";
}

/** What tells identifiers apart in one language. */
interface IdentRules {
  keywords: Set<string>;
  literals: Set<string>;
  builtins: Set<string>;
  /** The keyword after which a name is a function's (`function`, `def`). */
  fnKeyword: string;
}

/**
 * The token at `i` once strings, comments and the like are ruled out: a
 * number, an identifier (typed by `rules` and the previous significant
 * token), or an operator. Both tokenizers end on it.
 */
const JS_RULES: IdentRules = {
  keywords: JS_KEYWORDS,
  literals: JS_LITERALS,
  builtins: JS_BUILTINS,
  fnKeyword: "function",
};
const PY_RULES: IdentRules = {
  keywords: PY_KEYWORDS,
  literals: PY_LITERALS,
  builtins: PY_BUILTINS,
  fnKeyword: "def",
};

function numberIdentOrOp(
  src: string,
  i: number,
  p: Token | null,
  rules: IdentRules,
): [TokenType, string] {
  const c = src[i] as string;
  const num = /[\d.]/.test(c) ? matchAt(NUMBER, src, i) : null;
  if (num && num !== ".") return ["num", num];
  const id = matchAt(IDENT, src, i);
  if (id) {
    const callNext = nextNonSpace(src, i + id.length) === "(";
    if (p && p.type === "op" && p.text === "." && !rules.keywords.has(id)) {
      return [callNext ? "fn" : "id", id];
    }
    if (rules.keywords.has(id)) return ["kw", id];
    if (rules.literals.has(id)) return ["lit", id];
    if (p && p.type === "kw" && p.text === "class") return ["cls", id];
    if (p && p.type === "kw" && p.text === rules.fnKeyword) return ["fn", id];
    if (rules.builtins.has(id)) return ["bi", id];
    return [callNext ? "fn" : "id", id];
  }
  return ["op", matchAt(OP, src, i) ?? c];
}

function tokenizeJs(src: string): Token[] {
  const out: Token[] = [];
  let prevSig: Token | null = null;
  let i = 0;
  const push = (type: TokenType, text: string) => {
    const t = { type, text };
    out.push(t);
    if (type !== "ws" && type !== "com") prevSig = t;
    i += text.length;
  };
  while (i < src.length) {
    const c = src[i] as string;
    const ws = matchAt(WS, src, i);
    if (ws) {
      push("ws", ws);
      continue;
    }
    if (src.startsWith("//", i) || (i === 0 && src.startsWith("#!", i))) {
      const end = src.indexOf("\n", i);
      push("com", src.slice(i, end < 0 ? src.length : end));
      continue;
    }
    if (src.startsWith("/*", i)) {
      const end = src.indexOf("*/", i + 2);
      push("com", src.slice(i, end < 0 ? src.length : end + 2));
      continue;
    }
    if (c === "'" || c === '"') {
      push("str", src.slice(i, scanQuoted(src, i, c, false)));
      continue;
    }
    if (c === "`") {
      push("str", src.slice(i, scanTemplate(src, i)));
      continue;
    }
    if (c === "/") {
      const p = prevSig as Token | null;
      const regexAllowed =
        p === null ||
        (p.type === "op" && !/^[)\]}]$/.test(p.text)) ||
        (p.type === "kw" && !["this", "super"].includes(p.text));
      if (regexAllowed) {
        const end = scanRegex(src, i);
        if (end > 0) {
          push("re", src.slice(i, end));
          continue;
        }
      }
    }
    const [type, text] = numberIdentOrOp(src, i, prevSig as Token | null, JS_RULES);
    push(type, text);
  }
  return out;
}

const PY_STRING_START = /(?:[rRbBuUfF]{1,2})?(?:'''|"""|'|")/y;

function tokenizePython(src: string): Token[] {
  const out: Token[] = [];
  let prevSig: Token | null = null;
  let atLineStart = true;
  let i = 0;
  const push = (type: TokenType, text: string) => {
    const t = { type, text };
    out.push(t);
    if (type !== "ws" && type !== "com") {
      prevSig = t;
      atLineStart = false;
    }
    if (type === "ws" && text.includes("\n")) atLineStart = true;
    i += text.length;
  };
  while (i < src.length) {
    const c = src[i] as string;
    const ws = matchAt(WS, src, i);
    if (ws) {
      push("ws", ws);
      continue;
    }
    if (c === "#") {
      const end = src.indexOf("\n", i);
      push("com", src.slice(i, end < 0 ? src.length : end));
      continue;
    }
    const s = /[rRbBuUfF'"]/.test(c) ? matchAt(PY_STRING_START, src, i) : null;
    if (s) {
      const quote = s.replace(/^[rRbBuUfF]+/, "");
      const start = i + s.length - quote.length;
      push("str", src.slice(i, scanQuoted(src, start, quote, quote.length === 3)));
      continue;
    }
    if (c === "@" && atLineStart) {
      const m = matchAt(/@[\w.]+/y, src, i);
      if (m) {
        push("dec", m);
        continue;
      }
    }
    const [type, text] = numberIdentOrOp(src, i, prevSig as Token | null, PY_RULES);
    push(type, text);
  }
  return out;
}

/** Tokens of `src` in `lang`; they concatenate back to `src`. Never throws. */
export function tokenize(src: string, lang: Lang | string | null | undefined): Token[] {
  if (typeof src !== "string" || src.length === 0) return [];
  try {
    if (lang === "python") return tokenizePython(src);
    return tokenizeJs(src);
  } catch {
    return [{ type: "id", text: src }];
  }
}

/** Splits tokens into lines; a token spanning lines is cut at each newline. */
export function toLines(tokens: readonly Token[]): Token[][] {
  const lines: Token[][] = [[]];
  for (const t of tokens) {
    const parts = t.text.split("\n");
    parts.forEach((part, k) => {
      if (k > 0) lines.push([]);
      if (part !== "") (lines[lines.length - 1] as Token[]).push({ type: t.type, text: part });
    });
  }
  return lines;
}

/**
 * Whether `src` defines `handler`, judged on tokens so comments and strings
 * do not count. Node: `function handler`, `const|let|var handler`,
 * `exports.handler`, or `handler` in an `export { … }` list. Python:
 * `def handler`, a top-level `handler = …`, or `import … as handler` /
 * `from … import handler`.
 */
export function definesHandler(src: string, lang: Lang | string | null | undefined): boolean {
  const toks = tokenize(src, lang);
  const sig = toks.filter((t) => t.type !== "ws" && t.type !== "com");
  if (lang === "python") {
    for (const line of toLines(toks)) {
      const lsig = line.filter((t) => t.type !== "ws" && t.type !== "com");
      const first = lsig[0];
      if (!first) continue;
      const importLine = first.type === "kw" && (first.text === "import" || first.text === "from");
      const col0 = line[0] === first;
      for (let k = 0; k < lsig.length; k++) {
        const t = lsig[k] as Token;
        if (t.text !== "handler" || t.type === "str") continue;
        const before = lsig[k - 1];
        const after = lsig[k + 1];
        if (before && before.type === "kw" && before.text === "def") return true;
        if (importLine) return true;
        if (k === 0 && col0 && after && after.type === "op" && (after.text === "=" || after.text === ":")) return true;
      }
    }
    return false;
  }
  let inExportList = false;
  for (let k = 0; k < sig.length; k++) {
    const t = sig[k] as Token;
    const prev = sig[k - 1];
    const prev2 = sig[k - 2];
    if (t.type === "op" && t.text === "{" && prev && prev.type === "kw" && prev.text === "export") inExportList = true;
    if (t.type === "op" && t.text === "}") inExportList = false;
    if (t.text !== "handler") continue;
    if (prev && prev.type === "kw" && ["function", "const", "let", "var"].includes(prev.text)) return true;
    if (prev && prev.text === "*" && prev2 && prev2.text === "function") return true;
    if (prev && prev.text === "." && prev2 && (prev2.text === "exports" || prev2.text === "module")) return true;
    if (inExportList) return true;
  }
  return false;
}

/**
 * A guess at the language of a source whose call did not say (a run in a kept
 * runtime needs no `lang`): python when its tell-tale lines outnumber
 * JavaScript's.
 */
export function guessLang(src: string): Lang {
  if (typeof src !== "string") return "node";
  const count = (re: RegExp) => (src.match(re) ?? []).length;
  const py =
    count(/^\s*(?:async\s+)?def\s+\w+\s*\(.*\)\s*(?:->\s*[^:]+)?:\s*$/gm) +
    count(/^\s*(?:import\s+[\w.]+(?:\s+as\s+\w+)?|from\s+[\w.]+\s+import\s+.+)\s*$/gm) +
    count(/^\s*(?:if|elif|else|for|while|with|try|except|class)\b[^{;]*:\s*$/gm) +
    count(/\bprint\(/g) +
    count(/^\s*#(?!!)/gm);
  const js =
    count(/\b(?:const|let|var|function)\s/g) +
    count(/=>/g) +
    count(/;\s*$/gm) +
    count(/\bconsole\.\w+\(/g) +
    count(/^\s*\/\//gm) +
    count(/\bimport\s.*\bfrom\s+['"]/g);
  return py > js ? "python" : "node";
}
