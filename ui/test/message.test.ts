/**
 * How a console message becomes the call a card reads (src/message.ts): the
 * chat envelope peeled, errors found in `output` before success in each shape
 * the console uses, calls in flight, double-encoded requests, and junk.
 */
import { describe, expect, it } from "vitest";
import { errorParts } from "../src/frame";
import { invocationOf, unwrapEnvelope } from "../src/message";

const RUN = "sandbox-code-runner::run";
const msg = (extra: Record<string, unknown>) => ({ id: "m", role: "function-trigger", functionId: RUN, input: { lang: "node", code: "1" }, createdAt: 0, ...extra });
const answer = { stdout: "hi\n", stderr: "", exit_code: 0, success: true, duration_ms: 3 };

describe("invocationOf", () => {
  it("reads a bare answer (a trace span) and the harness envelope (chat) alike", () => {
    expect(invocationOf(msg({ output: answer }))).toEqual({ function_id: RUN, input: { lang: "node", code: "1" }, running: false, output: answer });
    const envelope = { content: [{ type: "text", text: JSON.stringify(answer) }], details: answer };
    expect(invocationOf(msg({ output: envelope }))?.output).toEqual(answer);
    // An envelope without details: its text, parsed.
    expect(invocationOf(msg({ output: { content: [{ type: "text", text: JSON.stringify(answer) }] } }))?.output).toEqual(answer);
    expect(unwrapEnvelope({ content: [] })).toBeUndefined();
  });

  it("finds the error in output before any success, in every shape", () => {
    const wire = { code: "sandbox-code-runner::expired", message: "sandbox-code-runner::expired: runtime was reaped" };
    const chat = invocationOf(msg({ output: { error: { kind: "function_error", message: wire.message } } }));
    expect(chat?.output).toBeUndefined();
    expect(errorParts(chat?.error).code).toBe("sandbox-code-runner::expired");
    const withDetails = invocationOf(msg({ output: { error: { kind: "function_error", message: "failed", details: wire } } }));
    expect(withDetails?.error).toEqual(wire);
    const trace = invocationOf(msg({ output: { error: `Error: ${wire.message}` } }));
    expect(errorParts(trace?.error)).toEqual({ code: "sandbox-code-runner::expired", message: wire.message });
    const wrapped = invocationOf(msg({ output: { content: [], details: { error: wire } } }));
    expect(wrapped?.error).toEqual(wire);
  });

  it("reads a call in flight, and ignores an answer the host has not settled", () => {
    expect(invocationOf(msg({ running: true }))).toEqual({ function_id: RUN, input: { lang: "node", code: "1" }, running: true });
    expect(invocationOf(msg({ output: answer }), true)?.output).toBeUndefined();
  });

  it("parses a double-encoded request, and gives null for what is no message", () => {
    expect(invocationOf(msg({ input: JSON.stringify({ lang: "python", code: "x" }) }))?.input).toEqual({ lang: "python", code: "x" });
    for (const junk of [null, 1, "x", [], {}, { functionId: 3 }]) expect(invocationOf(junk)).toBeNull();
  });
});
