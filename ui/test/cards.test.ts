/**
 * Every card rendered server-side from the fixtures, through the console
 * message path (chat and trace shapes): what each card shows, in what order,
 * and that neither the card nor the raw-JSON pane (`redactRaw` of the request
 * and of the response, as the console applies it) holds a full runtime id.
 */
import { describe, expect, it } from "vitest";
import { KINDS, kindOf } from "../src/cards";
import { invocationOf } from "../src/message";
import { redactRaw } from "../src/redact";
import { renderCardToString } from "../src/render";
import { assertNoLeak, fixture, loadFixtures, toMessage, type Fixture, type MessageShape } from "./fixtures";

const fixtures = loadFixtures();

/** The card of fixture `f` as the console would hand it over. */
function card(f: Fixture, shape: MessageShape = "chat"): string {
  const inv = invocationOf(toMessage(f, shape));
  if (!inv) throw new Error(`${f.name}: no invocation`);
  return renderCardToString(inv);
}

/** A raw-JSON pane as the console shows it: redactRaw's output, pretty-printed. */
function pane(value: unknown): string {
  return JSON.stringify(redactRaw(value), null, 2) ?? "";
}

describe("every fixture renders without leaking a runtime id", () => {
  it("has fixtures for every operation but list_runtimes, recorded ones first", () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(15);
    for (const kind of KINDS.filter((k) => k !== "list_runtimes")) expect(fixtures.some((f) => kindOf(f.function_id) === kind)).toBe(true);
    expect(fixtures.filter((f) => f.recorded).length).toBeGreaterThanOrEqual(15);
  });

  for (const f of fixtures) {
    for (const shape of ["chat", "trace"] as const) {
      it(`${f.name} (${shape}): ${f.about}`, () => {
        const html = card(f, shape);
        expect(html.startsWith("<article")).toBe(true);
        expect(html).toContain('data-iii-ui="sandbox-code-runner"');
        expect(html).toContain(`data-fn="${kindOf(f.function_id)}"`);
        assertNoLeak(html, f, `${f.name} card`);
        const m = toMessage(f, shape);
        // The request pane holds every secret of the request; the response pane every id by shape.
        assertNoLeak(pane(m.input), m.input, `${f.name} request pane`);
        expect(pane(m.output)).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i);
        // Both shapes give the same card.
        if (shape === "trace") expect(html).toBe(card(f, "chat"));
      });
    }
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
    const html = card(fixture("run-python-ok"));
    order(html, 'class="scr-verdict"', "Succeeded", "exit 0", "Source", 'class="scr-code"', "Output", "scr-term-stdout", "squares: [1, 4, 9, 16, 25]");
    expect(html).toContain('data-tone="ok"');
    expect(html).toContain("one-shot");
  });

  it("highlights the source in its language", () => {
    const py = card(fixture("run-python-exception"));
    expect(py).toContain('<span class="tok-kw">def</span>');
    expect(py).toContain('<span class="tok-fn">parse</span>');
    const js = card(fixture("run-node-ok"));
    expect(js).toContain('<span class="tok-kw">const</span>');
    expect(js).toContain('<span class="tok-re">/\\s+/</span>');
    expect(js).toContain('<span class="tok-com">// word counts, sorted</span>');
    expect(js).toContain('data-lang="node"');
  });

  it("renders a non-zero exit as a warning, not an alert", () => {
    for (const name of ["run-python-exception", "run-node-exit-code", "run-keep-failed"]) {
      const html = card(fixture(name));
      expect(html).toMatch(/class="scr-card"[^>]*data-tone="warn"/);
      expect(html).not.toContain('data-tone="alert"');
    }
    const html = card(fixture("run-node-exit-code"));
    order(html, "Exited with code 3", "scr-term-stdout", "checking inputs", "scr-term-stderr", "missing INPUT_PATH");
  });

  it("says nothing was kept when a keep run fails", () => {
    const html = card(fixture("run-keep-failed"));
    expect(html).toContain("Nothing was kept");
    expect(html).not.toContain("scr-chip");
  });

  it("shows a kept runtime as a truncated chip only", () => {
    const f = fixture("run-node-keep");
    const id = (f.output as { runtime_id: string }).runtime_id;
    const html = card(f);
    expect(html).toContain(`<span class="scr-chip-id">${id.slice(0, 7)}…</span>`);
    expect(html).toContain("kept runtime");
    expect(html.split(id.slice(0, 7)).length).toBeGreaterThan(1);
  });

  it("filters ids out of source, stdout and stderr", () => {
    const f = fixture("run-reuse-leaky");
    const id = (f.input as { runtime_id: string }).runtime_id;
    const short = `${id.slice(0, 7)}…`;
    const html = card(f);
    expect(html).toContain(`runtime ${short} still has n=1`);
    expect(html).toContain(`do not share ${short}`);
    expect(html).toContain(`// reusing ${short}`);
    expect(html).toContain("reuse");
  });

  it("bounds long output and keeps its ends", () => {
    const html = card(fixture("run-python-long-output"));
    expect(html).toContain("line 0000 rt-0000…");
    expect(html).toContain("line 3999 rt-0000…");
    expect(html.length).toBeLessThan(200_000);
  });

  it("shows infrastructure errors as alerts, with the message filtered", () => {
    const html = card(fixture("run-expired-quotes-id"));
    expect(html).toMatch(/class="scr-card"[^>]*data-tone="alert"/);
    expect(html).toContain("Failed: expired");
    expect(html).toContain("runtime rt-3f2b… was reaped");
    const gone = card(fixture("run-after-teardown"));
    expect(gone).toContain("Failed: runtime_not_found");
  });

  it("shows a call in flight as pending, with its source", () => {
    const html = card(fixture("run-pending"));
    expect(html).toContain('data-tone="pending"');
    expect(html).toContain("Running…");
    expect(html).toContain('class="scr-code"');
    expect(html).not.toContain("Output");
  });

  it("says when a settled call has no response it can read", () => {
    const html = renderCardToString({ function_id: "sandbox-code-runner::run", input: { lang: "node", code: "1" } });
    expect(html).toContain("No response recorded");
    expect(html).toContain('data-tone="neutral"');
  });

  it("shows a value when a code-runner style result is present, and explains null", () => {
    const withNull = renderCardToString({ function_id: "sandbox-code-runner::run", input: { lang: "python", code: "x = 1" }, output: { stdout: "", stderr: "", exit_code: 0, success: true, duration_ms: 3, result: null } });
    expect(withNull).toContain("assign ");
    const withValue = renderCardToString({ function_id: "sandbox-code-runner::run", input: { lang: "node", code: "return 4" }, output: { stdout: "", stderr: "", exit_code: 0, success: true, duration_ms: 3, result: { n: 4 } } });
    expect(withValue).toContain("&quot;n&quot;: 4");
  });

  it("names a session's state, and says what a reset lost", () => {
    const base = { stdout: "", stderr: "", exit_code: 0, success: true, duration_ms: 3, result: null, runtime_id: "rt-00000000-0000-4000-8000-000000000001" };
    const continued = renderCardToString({ function_id: "sandbox-code-runner::run", input: { runtime_id: base.runtime_id, code: "x" }, output: { ...base, session: "continued" } });
    expect(continued).toContain("session continued");
    expect(continued).not.toContain("interpreter was lost");
    const reset = renderCardToString({ function_id: "sandbox-code-runner::run", input: { runtime_id: base.runtime_id, code: "x" }, output: { ...base, session: "reset" } });
    expect(reset).toContain("session reset");
    expect(reset).toContain("earlier globals are gone");
    const plain = renderCardToString({ function_id: "sandbox-code-runner::run", input: { lang: "python", code: "x", keep: true }, output: { ...base } });
    expect(plain).not.toContain("session");
  });
});

describe("register_function", () => {
  it("puts the namespace on its own line", () => {
    const html = card(fixture("register-python"));
    expect(html).toMatch(/<span class="scr-field-label">namespace<\/span><span class="scr-field-value"><code class="scr-mono">my-app::<\/code><\/span>/);
    expect(html).toContain("Registered");
    expect(html).toContain("Double a number.");
    expect(html).not.toContain("No handler is defined");
  });

  it("advises when no handler is defined, in either language", () => {
    const py = card(fixture("register-no-handler"));
    expect(py).toContain("No handler is defined");
    expect(py).toContain("def handler(payload):");
    const js = card(fixture("register-node-no-handler"));
    expect(js).toContain("No handler is defined");
    expect(js).toContain("export function handler(payload) { … }");
    expect(card(fixture("register-node"))).not.toContain("No handler is defined");
  });
});

describe("teardown", () => {
  it("lists the ids that stopped resolving, and the namespace", () => {
    const html = card(fixture("teardown-namespace"));
    order(html, "Torn down", "1 function unregistered", "namespace", "my-app::", "Stopped resolving", "my-app::double");
  });

  it("addresses a runtime by chip and says when nothing stopped resolving", () => {
    const html = card(fixture("teardown-runtime"));
    expect(html).toContain("scr-chip");
    expect(html).toContain("0 functions unregistered");
    expect(html).toContain("No function ids");
  });

  it("redacts a non-UUID runtime_id and an error string quoting it", () => {
    const html = card(fixture("teardown-error-string"));
    expect(html).toContain("Failed: runtime_not_found");
    expect(html).not.toContain("handmade-secret");
  });
});

describe("list_runtimes", () => {
  const entry = (i: number, kind: "kept" | "namespace", namespace?: string) => ({
    handle: `h-${String(i).padStart(16, "0")}`, kind, lang: i % 2 ? "python" : "node", namespace, functions: namespace ? [`${namespace}f${i}`] : [],
    created_at_ms: 1_000, last_used_at_ms: 61_000, idle_ttl_secs: 900, reap_at_ms: 961_000, executions: i, exec_ms: 1.5, vm: i === 3 ? "gone" : "alive",
  });
  const inventory = {
    generated_at_ms: 121_000, vm_check: "ok",
    runtimes: [...Array.from({ length: 14 }, (_, i) => entry(i, "namespace", i < 8 ? "billing::" : "etl::")), ...Array.from({ length: 6 }, (_, i) => entry(20 + i, "kept"))],
    pool: { node: { ready: 1, warming: 0, target: 1 }, python: { ready: 0, warming: 1, target: 1 } }, totals: {},
  };

  it("counts the runtimes, names the groups and bounds the table", () => {
    const html = renderCardToString({ function_id: "sandbox-code-runner::list_runtimes", input: {}, output: inventory });
    order(html, "20 live runtimes", "2 namespaces", "6 kept runtimes", "1 VM gone", "warm pool", "billing::", "etl::");
    expect(html).toContain('data-tone="warn"');
    expect(html.match(/<tr data-handle=/g)?.length).toBe(10);
    expect(html).toContain("10 more runtimes");
    expect(html).toContain('href="#/ext/sandbox-code-runner-runtimes"');
    expect(html).not.toContain("kept runtimes</th>");
  });

  it("reads an empty inventory and a junk answer", () => {
    const empty = renderCardToString({ function_id: "sandbox-code-runner::list_runtimes", input: {}, output: { ...inventory, runtimes: [] } });
    expect(empty).toContain("No live runtimes");
    // A fact that does not apply (no VM gone) leaves no empty slot behind.
    expect(empty).not.toContain('<span class="scr-fact"></span>');
    expect(renderCardToString({ function_id: "sandbox-code-runner::list_runtimes", input: {}, output: { nope: 1 } })).toContain("Not an inventory");
  });
});

describe("totality", () => {
  it("gives no card, without throwing, for what no card reads", () => {
    for (const v of [{}, { function_id: 5 }, { function_id: "x::run", input: {} }, { function_id: "sandbox-code-runner::run", input: "nope", output: [1] }, { function_id: "other::thing" }, { function_id: "sandbox-code-runner::inject-guidance", input: {} }]) {
      expect(renderCardToString(v as never)).toBe("");
    }
  });

  it("renders any answer to a readable request", () => {
    for (const output of [null, 1, "x", [], {}, { stdout: 5 }, { error: null }]) {
      for (const fn of KINDS) expect(renderCardToString({ function_id: `sandbox-code-runner::${fn}`, input: {}, output })).toContain("<article");
    }
  });
});
