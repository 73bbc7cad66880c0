/**
 * The stand-in tab's engine client (`host.iii`): calls are recorded and
 * answered from what the test set. `list_runtimes` answers the current
 * inventory; a `teardown` by namespace removes that namespace from it and
 * answers the ids that stopped resolving, as the worker does.
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

/** The inventory `list_runtimes` answers from now on. */
export function setInventory(inv: unknown): void {
  inventory = structuredClone(inv) as { runtimes: RuntimeLike[] };
}

export const iii: HostIii = {
  async trigger(functionId, payload = {}) {
    calls.push({ functionId, payload });
    if (functionId === "sandbox-code-runner::list_runtimes" && inventory) return structuredClone(inventory);
    if (functionId === "sandbox-code-runner::teardown" && inventory && typeof payload.namespace === "string") {
      const gone = inventory.runtimes.filter((r) => r.namespace === payload.namespace);
      inventory = { ...inventory, runtimes: inventory.runtimes.filter((r) => r.namespace !== payload.namespace) };
      return { namespace: payload.namespace, torn_down: true, unregistered: gone.flatMap((r) => r.functions ?? []) };
    }
    throw { code: "function_not_found", message: `no answer set for ${functionId}` };
  },
};
