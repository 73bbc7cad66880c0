import { describe, expect, it } from "vitest";
import { entries, kindOf, renderCardToString, FUNCTIONS } from "../src/index";
import { redactedJson } from "../src/redact";
import { assertNoLeak, fixture, loadFixtures } from "./fixtures";

const fixtures = loadFixtures();

/** The raw pane's text as the markup carries it (HTML-unescaped). */
function rawPane(html: string): string {
  const m = /<div class="scr-pane scr-raw"[^>]*><pre[^>]*>([\s\S]*?)<\/pre>/.exec(html);
  if (!m) throw new Error("no raw pane");
  return (m[1] as string).replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

describe("every fixture renders without leaking a runtime id", () => {
  it("has fixtures for every function, recorded ones first", () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(15);
    for (const fn of FUNCTIONS) expect(fixtures.some((f) => f.function_id === fn)).toBe(true);
    expect(fixtures.filter((f) => f.recorded).length).toBeGreaterThanOrEqual(15);
  });

  for (const f of fixtures) {
    it(`${f.name}: ${f.about}`, () => {
      const html = renderCardToString(f);
      expect(html.startsWith("<article")).toBe(true);
      expect(html).toContain('data-iii-ui="sandbox-code-runner"');
      expect(html).toContain(`data-fn="${kindOf(f.function_id)}"`);
      assertNoLeak(html, f, `${f.name} card`);
      const raw = rawPane(html);
      assertNoLeak(raw, f, `${f.name} raw pane`);
      // The raw pane is the redacted call, as valid JSON.
      expect(JSON.parse(raw)).toMatchObject({ function_id: f.function_id });
      assertNoLeak(redactedJson(f), f, `${f.name} copy JSON`);
      // Each registered entry renders the same card.
      const entry = entries().find((e) => e.function_id === f.function_id);
      expect(entry?.renderToString(f)).toBe(html);
      assertNoLeak(JSON.stringify(entry?.redactRaw(f)), f, `${f.name} console raw tab`);
    });
  }
});

function order(html: string, ...needles: string[]): void {
  let at = -1;
  for (const n of needles) {
    const i = html.indexOf(n, at + 1);
    expect(i, `${n} after position ${at}`).toBeGreaterThan(at);
    at = i;
  }
}

describe("run", () => {
  it("leads with the verdict, then the source, then the output", () => {
    const html = renderCardToString(fixture("run-python-ok"));
    order(html, 'class="scr-verdict"', "Succeeded", "exit 0", "Source", 'class="scr-code"', "Output", "scr-term-stdout", "squares: [1, 4, 9, 16, 25]");
    expect(html).toContain('data-tone="ok"');
    expect(html).toContain("one-shot");
  });

  it("highlights the source in its language", () => {
    const py = renderCardToString(fixture("run-python-exception"));
    expect(py).toContain('<span class="tok-kw">def</span>');
    expect(py).toContain('<span class="tok-fn">parse</span>');
    const js = renderCardToString(fixture("run-node-ok"));
    expect(js).toContain('<span class="tok-kw">const</span>');
    expect(js).toContain('<span class="tok-re">/\\s+/</span>');
    expect(js).toContain('<span class="tok-com">// word counts, sorted</span>');
    expect(js).toContain('data-lang="node"');
  });

  it("renders a non-zero exit as a warning, not an alert", () => {
    for (const name of ["run-python-exception", "run-node-exit-code", "run-keep-failed"]) {
      const html = renderCardToString(fixture(name));
      expect(html).toMatch(/class="scr-card"[^>]*data-tone="warn"/);
      expect(html).not.toContain('data-tone="alert"');
    }
    const html = renderCardToString(fixture("run-node-exit-code"));
    order(html, "Exited with code 3", "scr-term-stdout", "checking inputs", "scr-term-stderr", "missing INPUT_PATH");
  });

  it("says nothing was kept when a keep run fails", () => {
    const html = renderCardToString(fixture("run-keep-failed"));
    expect(html).toContain("Nothing was kept");
    expect(html).not.toContain("scr-chip");
  });

  it("shows a kept runtime as a truncated chip only", () => {
    const f = fixture("run-node-keep");
    const id = (f.output as { runtime_id: string }).runtime_id;
    const html = renderCardToString(f);
    expect(html).toContain(`<span class="scr-chip-id">${id.slice(0, 7)}…</span>`);
    expect(html).toContain("kept runtime");
    expect(html.split(id.slice(0, 7)).length).toBeGreaterThan(1);
  });

  it("filters ids out of source, stdout and stderr", () => {
    const f = fixture("run-reuse-leaky");
    const id = (f.input as { runtime_id: string }).runtime_id;
    const short = `${id.slice(0, 7)}…`;
    const html = renderCardToString(f);
    expect(html).toContain(`runtime ${short} still has n=1`);
    expect(html).toContain(`do not share ${short}`);
    expect(html).toContain(`// reusing ${short}`);
    expect(html).toContain("reuse");
  });

  it("bounds long output and keeps its ends", () => {
    const html = renderCardToString(fixture("run-python-long-output"));
    expect(html).toContain("line 0000 rt-0000…");
    expect(html).toContain("line 3999 rt-0000…");
    expect(html.length).toBeLessThan(200_000);
  });

  it("shows infrastructure errors as alerts, with the message filtered", () => {
    const html = renderCardToString(fixture("run-expired-quotes-id"));
    expect(html).toMatch(/class="scr-card"[^>]*data-tone="alert"/);
    expect(html).toContain("Failed: expired");
    expect(html).toContain("runtime rt-3f2b… was reaped");
    const gone = renderCardToString(fixture("run-after-teardown"));
    expect(gone).toContain("Failed: runtime_not_found");
  });

  it("shows a call in flight as pending", () => {
    const html = renderCardToString(fixture("run-pending"));
    expect(html).toContain('data-tone="pending"');
    expect(html).toContain("Running…");
    expect(html).not.toContain("Output");
  });

  it("shows a value when a code-runner style result is present, and explains null", () => {
    const withNull = renderCardToString({ function_id: "sandbox-code-runner::run", input: { lang: "python", code: "x = 1" }, output: { stdout: "", stderr: "", exit_code: 0, success: true, duration_ms: 3, result: null } });
    expect(withNull).toContain("assign ");
    const withValue = renderCardToString({ function_id: "sandbox-code-runner::run", input: { lang: "node", code: "return 4" }, output: { stdout: "", stderr: "", exit_code: 0, success: true, duration_ms: 3, result: { n: 4 } } });
    expect(withValue).toContain("&quot;n&quot;: 4");
  });
});

describe("register_function", () => {
  it("puts the namespace on its own line", () => {
    const html = renderCardToString(fixture("register-python"));
    expect(html).toMatch(/<span class="scr-field-label">namespace<\/span><span class="scr-field-value"><code class="scr-mono">my-app::<\/code><\/span>/);
    expect(html).toContain("Registered");
    expect(html).toContain("Double a number.");
    expect(html).not.toContain("No handler is defined");
  });

  it("advises when no handler is defined, in either language", () => {
    const py = renderCardToString(fixture("register-no-handler"));
    expect(py).toContain("No handler is defined");
    expect(py).toContain("def handler(payload):");
    const js = renderCardToString(fixture("register-node-no-handler"));
    expect(js).toContain("No handler is defined");
    expect(js).toContain("export function handler(payload) { … }");
    expect(renderCardToString(fixture("register-node"))).not.toContain("No handler is defined");
  });
});

describe("teardown", () => {
  it("lists the ids that stopped resolving, and the namespace", () => {
    const html = renderCardToString(fixture("teardown-namespace"));
    order(html, "Torn down", "1 function unregistered", "namespace", "my-app::", "Stopped resolving", "my-app::double");
  });

  it("addresses a runtime by chip and says when nothing stopped resolving", () => {
    const html = renderCardToString(fixture("teardown-runtime"));
    expect(html).toContain("scr-chip");
    expect(html).toContain("0 functions unregistered");
    expect(html).toContain("No function ids");
  });

  it("redacts a non-UUID runtime_id and an error string quoting it", () => {
    const html = renderCardToString(fixture("teardown-error-string"));
    expect(html).toContain("Failed: runtime_not_found");
    expect(html).not.toContain("handmade-secret");
  });
});

describe("totality", () => {
  it("renders anything without throwing", () => {
    for (const v of [null, undefined, 1, "x", [], {}, { function_id: 5 }, { function_id: "x::run", input: "nope", output: [1] }, { function_id: "other::thing" }]) {
      expect(typeof renderCardToString(v)).toBe("string");
    }
    expect(renderCardToString({ function_id: "other::thing", input: { runtime_id: "rt-3f2b9c1e-8d4a-4e6f-9b21-7c5d0a9e1f42" } })).not.toMatch(/3f2b9c1e-8d4a/);
  });
});
