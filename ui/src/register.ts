/**
 * Entry of `cards.js`: publishes the cards and registers one renderer per
 * function with the console. See ui/README.md, "Registration".
 */

import * as api from "./index";
import type { RendererEntry } from "./index";

/** The console's registration queue: an array until the console takes it over. */
interface ConsoleUiQueue {
  push(...entries: RendererEntry[]): unknown;
}

declare global {
  // eslint-disable-next-line no-var
  var SandboxCodeRunnerUI: typeof api | undefined;
  // eslint-disable-next-line no-var
  var __iiiConsoleUi: ConsoleUiQueue | undefined;
}

(() => {
  const g = globalThis;
  g.SandboxCodeRunnerUI = api;
  const list = api.entries();
  try {
    const queue: ConsoleUiQueue = g.__iiiConsoleUi ?? [];
    g.__iiiConsoleUi = queue;
    queue.push(...list);
  } catch {
    // A console whose queue throws still finds the cards on the global.
  }
  try {
    const ev = typeof CustomEvent === "function" ? new CustomEvent("iii:console-ui", { detail: { ui: api.UI_NAME, version: api.VERSION, entries: list } }) : null;
    if (ev && typeof g.dispatchEvent === "function") g.dispatchEvent(ev);
  } catch {
    // No DOM events here (a worker, a test runner): the queue is enough.
  }
})();
