/**
 * The runtimes page's life: fetching `sandbox-code-runner::list_runtimes`,
 * refreshing, tearing a namespace down, mounting the view (`page-view.ts`)
 * and registering the page with the console. The page shows operators the
 * live runtimes grouped by namespace (kept runtimes in their own group), the
 * warm pool, per-operation totals, and a teardown button per namespace.
 *
 * - One `list_runtimes` call per refresh; refreshes happen on open, on the
 *   Refresh button, after a teardown, and every `refreshMs` only while the
 *   page is mounted and auto-refresh is on (no polling when it is closed).
 * - Usable at 1,000 runtimes: groups are paged ({@link GROUPS_PER_PAGE}) and
 *   each group shows {@link ROWS_PER_PAGE} rows at a time with its own pager,
 *   so a refresh renders a few hundred rows at most.
 * - Runtimes are named by their non-secret handle; the inventory carries no
 *   runtime id, and the renderer's redactor would still mask one.
 *
 * Served as `sandbox-code-runner/page.js` (an ES module) to the
 * `console:script` trigger: its default export is the console's
 * `setup(host)`, which registers the page (`#/ext/sandbox-code-runner-runtimes`).
 */

import { sharedReact, type Host } from "./console";
import { UI_ATTR } from "./frame";
import { CONFIGURATION_ID, LIST_RUNTIMES, PAGE_ID, TEARDOWN, UI_NAME } from "./ids";
import { groups, span, type Inventory, type RuntimeEntry } from "./inventory";
import { GROUPS_PER_PAGE, NOOP, ROWS_PER_PAGE, initialState, pageTree, type Actions, type ViewState } from "./page-view";
import { makeRedactor } from "./redact";
import { renderToDom, renderToString, type Env } from "./vnode";

export type { Inventory, RuntimeEntry, Actions, ViewState };
export { groups, span, CONFIGURATION_ID, GROUPS_PER_PAGE, ROWS_PER_PAGE, initialState, pageTree, LIST_RUNTIMES, TEARDOWN, PAGE_ID };

/** What the page needs of the console's bus client. */
export interface PageClient {
  trigger(functionId: string, payload?: Record<string, unknown>): Promise<unknown>;
}

export function renderPageToString(inventory: unknown, now?: number): string {
  const state = { ...initialState(), inventory: inventory as Inventory };
  return renderToString(pageTree(state, NOOP, now ?? (inventory as Inventory)?.generated_at_ms ?? Date.now()), makeRedactor());
}

export interface MountPageOptions {
  /** Auto-refresh period while mounted; 0 disables the timer. */
  refreshMs?: number;
  doc?: Document;
}

function message(e: unknown): string {
  if (e && typeof e === "object") {
    const o = e as Record<string, unknown>;
    const code = typeof o.code === "string" ? o.code : "";
    const msg = typeof o.message === "string" ? o.message : "";
    if (code || msg) return [code, msg].filter(Boolean).join(": ");
  }
  return String(e);
}

/** Mounts the live page into `host`; returns the unmount. */
export function mountPage(host: Element, client: PageClient, options: MountPageOptions = {}): () => void {
  const doc = options.doc ?? host.ownerDocument;
  const win = doc.defaultView;
  const refreshMs = options.refreshMs ?? 5000;
  let state = initialState();
  let alive = true;
  let inflight: Promise<void> | null = null;
  const env: Env = {
    copy: async (t) => {
      await win?.navigator.clipboard?.writeText(t);
    },
    reducedMotion: !!win?.matchMedia?.("(prefers-reduced-motion: reduce)").matches,
  };
  const set = (patch: Partial<ViewState>) => {
    state = { ...state, ...patch };
    draw();
  };
  const refresh = (): Promise<void> => {
    if (inflight) return inflight;
    set({ loading: true });
    inflight = client
      .trigger(LIST_RUNTIMES, {})
      .then(
        (inv) => {
          if (alive) set({ inventory: inv as Inventory, error: null, loading: false });
        },
        (e) => {
          if (alive) set({ error: `list_runtimes failed: ${message(e)}`, loading: false });
        },
      )
      .finally(() => {
        inflight = null;
      });
    return inflight;
  };
  const actions: Actions = {
    refresh: () => void refresh(),
    setGroupPage: (p) => set({ groupPage: Math.max(0, p) }),
    setRowPage: (ns, p) => set({ rowPage: { ...state.rowPage, [ns]: Math.max(0, p) } }),
    toggleAuto: () => set({ auto: !state.auto }),
    teardown: (ns) => {
      if (state.confirming !== ns) {
        set({ confirming: ns, notice: null });
        return;
      }
      set({ confirming: null, notice: `Tearing down ${ns}…` });
      client.trigger(TEARDOWN, { namespace: ns }).then(
        (out) => {
          const fns = ((out as { unregistered?: string[] })?.unregistered ?? []).length;
          if (alive) set({ notice: `Tore down ${ns}: ${fns} function${fns === 1 ? "" : "s"} unregistered.` });
          void refresh();
        },
        (e) => {
          if (alive) set({ notice: null, error: `teardown of ${ns} failed: ${message(e)}` });
        },
      );
    },
  };
  function draw(): void {
    if (!alive) return;
    const node = renderToDom(pageTree(state, actions), doc, env, makeRedactor());
    host.replaceChildren(node);
  }
  draw();
  void refresh();
  const timer =
    refreshMs > 0 && win
      ? win.setInterval(() => {
          if (state.auto && doc.visibilityState !== "hidden") void refresh();
        }, refreshMs)
      : null;
  return () => {
    alive = false;
    if (timer !== null) win?.clearInterval(timer);
    host.replaceChildren();
  };
}

/** The configuration entry this worker owns; the console puts its action in the page header. */

/**
 * The console's entry point: registers the page, with the worker's
 * configuration entry. Its component is a plain element the page mounts
 * itself into, built with the console's shared React (the `react` import),
 * so nothing of React is bundled. Without that React, or without a pages
 * registrar, it logs why and throws rather than registering nothing quietly.
 */
export default async function setup(host: Host): Promise<() => void> {
  const React = await sharedReact("page.js");
  if (typeof host?.pages?.register !== "function") {
    const text = `[${UI_NAME}] page.js: this console's host has no pages.register; the runtimes page is not registered.`;
    console.error(text);
    throw new Error(text);
  }
  const RuntimesPage = () => {
    const ref = React.useRef<Element | null>(null);
    React.useEffect(() => (ref.current ? mountPage(ref.current, host.iii) : undefined), []);
    return React.createElement("div", { ref, [UI_ATTR]: UI_NAME });
  };
  return host.pages.register({ id: PAGE_ID, title: "Sandbox runtimes", configurationId: CONFIGURATION_ID, render: RuntimesPage });
}
