/**
 * The console's injectable-UI contract, as this worker's two scripts use it:
 * the `host` a script's `setup(host)` receives, a function-trigger renderer
 * and the message it renders, a page registration, and the console's shared
 * React, reached through the `react` import (never bundled).
 *
 * Read from the console that implements the contract (iii-hq/workers,
 * console/web/src/types/injectable-ui.ts); only the fields used here.
 */

import { UI_NAME } from "./frame";

/** One function call as the console hands it to a renderer (chat or a trace span). */
export interface FunctionTriggerMessage {
  id: string;
  role: "function-trigger";
  functionId: string;
  description?: string;
  input: unknown;
  /** The answer; an error travels here too (`{error: …}`). */
  output?: unknown;
  durationMs?: number;
  /** The call is in flight. */
  running?: boolean;
  pendingApproval?: boolean;
  createdAt: number;
}

/** A React node, as far as these scripts are concerned. */
export type ReactNode = unknown;

/** What `host.functionTriggers.register` takes. `tryRender*` answer null to fall through. */
export interface FunctionTriggerRenderer {
  id: string;
  isMatch(functionId: string): boolean;
  tryRender(message: FunctionTriggerMessage): ReactNode | null;
  tryRenderRunning?(message: FunctionTriggerMessage): ReactNode | null;
  tryRenderPreview?(message: FunctionTriggerMessage): ReactNode | null;
  /** Pure and total: what the raw-JSON pane and its copy button show of a request or a response. */
  redactRaw?(value: unknown): unknown;
}

export interface PageRegistration {
  /** kebab-case; routed at `#/ext/<id>`. */
  id: string;
  title: string;
  /** The configuration entry the page belongs to; the console puts its action in the page header. */
  configurationId?: string;
  /** A React component. */
  render: unknown;
}

/** The tab's engine client, narrowed. */
export interface HostIii {
  trigger(functionId: string, payload?: Record<string, unknown>, options?: { timeoutMs?: number }): Promise<unknown>;
}

/** What `setup(host)` receives; every registrar returns its unregister function. */
export interface Host {
  iii: HostIii;
  /** The script's asset path, e.g. `sandbox-code-runner/cards.js`. */
  path: string;
  pages: { register(page: PageRegistration): () => void };
  functionTriggers: { register(renderer: FunctionTriggerRenderer): () => void };
}

/** The slice of React these scripts use; the console's own instance. */
export interface ReactApi {
  createElement(type: unknown, props?: Record<string, unknown> | null, ...children: unknown[]): ReactNode;
  useRef<T>(initial: T): { current: T };
  useEffect(effect: () => void | (() => void), deps?: readonly unknown[]): void;
  useLayoutEffect(effect: () => void | (() => void), deps?: readonly unknown[]): void;
}

const HOOKS = ["createElement", "useRef", "useEffect", "useLayoutEffect"] as const;

function usable(candidate: unknown): ReactApi | null {
  if (!candidate || (typeof candidate !== "object" && typeof candidate !== "function")) return null;
  const r = candidate as Record<string, unknown>;
  return HOOKS.every((k) => typeof r[k] === "function") ? (candidate as ReactApi) : null;
}

function describe(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * The console's shared React, imported as `react` (the console's import map
 * points it at its `/vendor` shim over `window.__III_CONSOLE__.React`).
 *
 * When it is absent the script must not go quiet: this logs an error naming
 * the asset and what is missing, then throws, so the console's loader logs
 * the failed load too and keeps nothing of the script.
 */
export async function sharedReact(asset: string): Promise<ReactApi> {
  let found: ReactApi | null = null;
  let why = "";
  try {
    const mod = (await import("react")) as { default?: unknown };
    found = usable(mod) ?? usable(mod.default);
    if (!found) why = `the \`react\` import has no ${HOOKS.join("/")}`;
  } catch (e) {
    why = `the \`react\` import failed: ${describe(e)}`;
  }
  if (found) return found;
  const text =
    `[${UI_NAME}] ${asset}: the console's shared React is missing (${why}). ` +
    `Nothing of ${asset} is registered: it needs a console that implements injectable UI ` +
    `(window.__III_CONSOLE__.React and an import map entry for "react").`;
  console.error(text);
  throw new Error(text);
}
