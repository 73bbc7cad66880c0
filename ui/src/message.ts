/**
 * What a console message says about one call, in the terms the cards read:
 * the request, the response, the error, and whether the call is in flight.
 *
 * The console carries an error in `output` (`{error: …}`: an object
 * `{kind, message, details?}` in chat, a `"type: message"` string in a
 * trace), and it parses errors before success. In chat a successful answer
 * arrives wrapped in the harness envelope `{content: [{type: "text", text}],
 * details}`; a trace span carries the bare response. Both are read here.
 */

import type { FunctionTriggerMessage } from "./console";
import { record, type Invocation } from "./frame";

function isRecord(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === "object" && !Array.isArray(v);
}

/** A string that is itself a JSON object (a double-encoded payload), parsed; else undefined. */
function embeddedObject(s: unknown): Record<string, unknown> | undefined {
  if (typeof s !== "string") return undefined;
  const t = s.trim();
  if (!t.startsWith("{")) return undefined;
  try {
    const v: unknown = JSON.parse(t);
    return isRecord(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** The text blocks of a harness envelope, joined; undefined when `v` is no envelope. */
function envelopeText(v: Record<string, unknown>): string | undefined {
  if (!Array.isArray(v.content)) return undefined;
  const parts: string[] = [];
  for (const block of v.content) {
    const b = record(block);
    if (b.type === "text" && typeof b.text === "string") parts.push(b.text);
  }
  return parts.join("\n");
}

/** The harness envelope peeled: its `details`, else its text (parsed when it is JSON). */
export function unwrapEnvelope(v: unknown): unknown {
  if (!isRecord(v)) return v;
  const text = envelopeText(v);
  if (text === undefined) return v;
  if (v.details !== undefined && v.details !== null) return v.details;
  return embeddedObject(text) ?? (text === "" ? undefined : text);
}

/** The error an `{error: …}` output carries, in the shape the cards' error verdict reads. */
function errorOf(value: unknown): unknown {
  if (!isRecord(value)) return value;
  // Chat: {kind: "function_error", message, details?, content?}. The worker's
  // own body {code, message} may ride in `details`; the message text is next best.
  const details = record(value.details);
  if (typeof details.code === "string" && typeof details.message === "string") return { code: details.code, message: details.message };
  const inner = embeddedObject(value.message);
  if (inner && typeof inner.code === "string") return inner;
  return value;
}

function hasError(v: unknown): v is { error: unknown } {
  return isRecord(v) && "error" in v && v.error !== undefined && v.error !== null;
}

/**
 * The call `message` describes, or null when it is not one (no function id).
 * `running` forces the in-flight reading (the console's `tryRenderRunning`).
 */
export function invocationOf(message: unknown, running = false): Invocation | null {
  if (!isRecord(message) || typeof message.functionId !== "string") return null;
  const m = message as unknown as FunctionTriggerMessage;
  const input = embeddedObject(m.input) ?? m.input;
  const inFlight = running || m.running === true;
  const inv: Invocation = { function_id: m.functionId, input, running: inFlight };
  if (inFlight || m.output === undefined || m.output === null) return inv;
  if (hasError(m.output)) return { ...inv, error: errorOf(m.output.error) };
  const answer = unwrapEnvelope(m.output);
  if (hasError(answer)) return { ...inv, error: errorOf(answer.error) };
  return { ...inv, output: embeddedObject(answer) ?? answer };
}
