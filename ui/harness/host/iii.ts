/**
 * The stand-in tab's engine client (`host.iii`): calls are recorded and
 * answered from what the test set. `list_runtimes` answers the current
 * inventory; a `teardown` by namespace removes that namespace from it and
 * answers the ids that stopped resolving, as the worker does; `watch`
 * answers from a script of frames, one more batch of them arriving with
 * each call, the frames past `after` as the worker does.
 */

import type { HostIii } from "../../src/console";

export interface Call {
  functionId: string;
  payload: Record<string, unknown>;
}

export const calls: Call[] = [];

interface RuntimeLike {
  namespace?: string;
  functions?: string[];
}

let inventory: { runtimes: RuntimeLike[] } | null = null;

interface WatchFrame {
  seq: number;
  type: "stdout" | "stderr";
  data: string;
}

/** The frames `watch` has to give: `batches[i]` arrives with the (i+1)th call; `ends` once all came. */
let watch: { batches: WatchFrame[][]; ends: boolean; arrived: number } | null = null;

/** What `watch` answers from now on: a batch more each call. */
export function setWatchScript(script: { batches: WatchFrame[][]; ends: boolean }): void {
  watch = { ...structuredClone(script), arrived: 0 };
}

function answerWatch(payload: Record<string, unknown>): unknown {
  if (!watch) throw { code: "sandbox-code-runner::invalid_request", message: "sandbox-code-runner::invalid_request: `output`: no streamed run answers to this writer ref" };
  watch.arrived = Math.min(watch.arrived + 1, watch.batches.length);
  const came = watch.batches.slice(0, watch.arrived).flat();
  const after = typeof payload.after === "number" ? payload.after : -1;
  const frames = came.filter((f) => f.seq > after);
  const last = came[came.length - 1];
  const ended = watch.ends && watch.arrived === watch.batches.length;
  return { frames, next: last ? last.seq : payload.after, ended, skipped: 0, ...(ended ? { end: { seq: came.length, type: "end", dropped: 0, exit_code: 0, success: true } } : {}) };
}

/** The inventory `list_runtimes` answers from now on. */
export function setInventory(inv: unknown): void {
  inventory = structuredClone(inv) as { runtimes: RuntimeLike[] };
}

export const iii: HostIii = {
  async trigger(functionId, payload = {}) {
    calls.push({ functionId, payload });
    if (functionId === "sandbox-code-runner::list_runtimes" && inventory) return structuredClone(inventory);
    if (functionId === "sandbox-code-runner::watch") return answerWatch(payload);
    if (functionId === "sandbox-code-runner::teardown" && inventory && typeof payload.namespace === "string") {
      const gone = inventory.runtimes.filter((r) => r.namespace === payload.namespace);
      inventory = { ...inventory, runtimes: inventory.runtimes.filter((r) => r.namespace !== payload.namespace) };
      return { namespace: payload.namespace, torn_down: true, unregistered: gone.flatMap((r) => r.functions ?? []) };
    }
    throw { code: "function_not_found", message: `no answer set for ${functionId}` };
  },
};
