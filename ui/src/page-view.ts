/**
 * The runtimes page's view: a pure function from the page's state (the last
 * `list_runtimes` answer, paging, the pending teardown confirmation) to a
 * virtual DOM tree. No bus, no timers: `page.ts` owns those.
 */

import { UI_ATTR, UI_NAME } from "./frame";
import { KEPT, clock, groups, span, type Inventory, type RuntimeEntry } from "./inventory";
import { clickable, h, type Child, type VElement } from "./vnode";

export const GROUPS_PER_PAGE = 8;
export const ROWS_PER_PAGE = 12;
export interface ViewState {
  inventory: Inventory | null;
  error: string | null;
  loading: boolean;
  groupPage: number;
  rowPage: Record<string, number>;
  /** Namespace whose teardown awaits a second click. */
  confirming: string | null;
  /** Last teardown's outcome. */
  notice: string | null;
  auto: boolean;
}

export function initialState(): ViewState {
  return { inventory: null, error: null, loading: false, groupPage: 0, rowPage: {}, confirming: null, notice: null, auto: true };
}

/** The handlers a live page wires; absent in server-side rendering. */
export interface Actions {
  refresh(): void;
  setGroupPage(p: number): void;
  setRowPage(ns: string, p: number): void;
  teardown(ns: string): void;
  toggleAuto(): void;
}

export const NOOP: Actions = { refresh() {}, setGroupPage() {}, setRowPage() {}, teardown() {}, toggleAuto() {} };

function button(label: Child, onClick: () => void, attrs: Record<string, string | boolean> = {}): VElement {
  return clickable("button", { type: "button", class: "scr-pg-btn", ...attrs }, () => onClick(), label);
}

function pager(page: number, pages: number, go: (p: number) => void, what: string): VElement | null {
  if (pages <= 1) return null;
  return h(
    "nav",
    { class: "scr-pg-pager", "aria-label": `${what} pages` },
    button("‹ Prev", () => go(page - 1), { disabled: page <= 0, "aria-label": `previous ${what}` }),
    h("span", { class: "scr-pg-pageno" }, `${page + 1} / ${pages}`),
    button("Next ›", () => go(page + 1), { disabled: page >= pages - 1, "aria-label": `next ${what}` }),
  );
}

function row(r: RuntimeEntry, now: number): VElement {
  const idle = now - r.last_used_at_ms;
  const reapIn = r.reap_at_ms - now;
  return h(
    "tr",
    { "data-handle": r.handle },
    h("td", { class: "scr-pg-mono" }, r.handle),
    h("td", null, h("span", { class: `scr-pg-lang is-${r.lang}` }, r.lang)),
    h("td", { class: "scr-pg-fns" }, r.functions.length ? r.functions.join(", ") : "—"),
    h("td", { title: clock(r.created_at_ms) }, `${span(now - r.created_at_ms)} ago`),
    h("td", { title: clock(r.last_used_at_ms) }, `idle ${span(idle)}`),
    h("td", { title: `idle TTL ${r.idle_ttl_secs}s; reaped at ${clock(r.reap_at_ms)} if unused` }, reapIn > 0 ? `in ${span(reapIn)}` : "due"),
    h("td", { class: "scr-pg-num" }, String(r.executions)),
    h("td", { class: "scr-pg-num" }, `${r.exec_ms.toFixed(1)} ms`),
    h("td", null, h("span", { class: `scr-pg-vm is-${r.vm}` }, r.vm)),
  );
}

function group(ns: string, rs: RuntimeEntry[], state: ViewState, actions: Actions, now: number): VElement {
  const pages = Math.max(1, Math.ceil(rs.length / ROWS_PER_PAGE));
  const page = Math.min(state.rowPage[ns] ?? 0, pages - 1);
  const shown = rs.slice(page * ROWS_PER_PAGE, (page + 1) * ROWS_PER_PAGE);
  const fns = rs.reduce((n, r) => n + r.functions.length, 0);
  const gone = rs.filter((r) => r.vm === "gone").length;
  const confirming = state.confirming === ns;
  const title = ns === KEPT ? "kept runtimes" : ns;
  return h(
    "section",
    { class: "scr-pg-group", "data-namespace": ns === KEPT ? null : ns },
    h(
      "header",
      { class: "scr-pg-group-head" },
      h("h3", null, title),
      h("span", { class: "scr-pg-meta" }, `${rs.length} runtime${rs.length === 1 ? "" : "s"}`, ns === KEPT ? null : ` · ${fns} function${fns === 1 ? "" : "s"}`, gone ? ` · ${gone} gone` : null),
      ns === KEPT
        ? h("span", { class: "scr-pg-hint" }, "tear down with the runtime_id its creator holds")
        : button(confirming ? `Confirm: tear down ${ns}` : "Tear down", () => actions.teardown(ns), {
            class: confirming ? "scr-pg-btn is-danger is-confirming" : "scr-pg-btn is-danger",
            "data-teardown": ns,
          }),
    ),
    h(
      "table",
      { class: "scr-pg-table" },
      h(
        "thead",
        null,
        h("tr", null, ...["handle", "lang", "functions", "created", "last used", "reaped if idle", "execs", "exec time", "VM"].map((c) => h("th", { scope: "col" }, c))),
      ),
      h("tbody", null, ...shown.map((r) => row(r, now))),
    ),
    pager(page, pages, (p) => actions.setRowPage(ns, p), `${title} rows`),
  );
}

function pool(inv: Inventory): VElement {
  return h(
    "div",
    { class: "scr-pg-panel" },
    h("h3", null, "Warm pool"),
    h(
      "table",
      { class: "scr-pg-table is-compact" },
      h("thead", null, h("tr", null, h("th", null, "lang"), h("th", null, "ready"), h("th", null, "warming"), h("th", null, "target"))),
      h(
        "tbody",
        null,
        ...Object.entries(inv.pool).map(([lang, p]) =>
          h("tr", null, h("td", null, lang), h("td", { class: "scr-pg-num" }, String(p.ready)), h("td", { class: "scr-pg-num" }, String(p.warming)), h("td", { class: "scr-pg-num" }, String(p.target))),
        ),
      ),
    ),
  );
}

function totals(inv: Inventory): VElement {
  const ops = Object.entries(inv.totals ?? {});
  return h(
    "div",
    { class: "scr-pg-panel" },
    h("h3", null, "Totals since start"),
    h(
      "table",
      { class: "scr-pg-table is-compact" },
      h("thead", null, h("tr", null, h("th", null, "operation"), h("th", null, "ops"), h("th", null, "sandbox calls"), h("th", null, "bytes planted"), h("th", null, "worker µs/op"))),
      h(
        "tbody",
        null,
        ...ops.map(([op, t]) =>
          h(
            "tr",
            null,
            h("td", null, op),
            h("td", { class: "scr-pg-num" }, String(t.ops ?? 0)),
            h("td", { class: "scr-pg-num" }, String(t.sandbox_calls ?? 0)),
            h("td", { class: "scr-pg-num" }, String(t.bytes_planted ?? 0)),
            h("td", { class: "scr-pg-num" }, String(t.worker_added_us_mean ?? 0)),
          ),
        ),
      ),
    ),
  );
}

/** The whole page as a tree. */
export function pageTree(state: ViewState, actions: Actions = NOOP, now: number = Date.now()): VElement {
  const inv = state.inventory;
  const all = inv ? groups(inv) : [];
  const pages = Math.max(1, Math.ceil(all.length / GROUPS_PER_PAGE));
  const gp = Math.min(state.groupPage, pages - 1);
  const shown = all.slice(gp * GROUPS_PER_PAGE, (gp + 1) * GROUPS_PER_PAGE);
  const count = inv?.runtimes.length ?? 0;
  const namespaces = all.filter(([ns]) => ns !== KEPT).length;
  return h(
    "div",
    { [UI_ATTR]: UI_NAME, class: "scr-pg", "data-loading": state.loading ? "true" : "false" },
    h(
      "header",
      { class: "scr-pg-head" },
      // The title is the console's (the page header it draws from the registration).
      h(
        "span",
        { class: "scr-pg-meta", "data-role": "summary" },
        inv ? `${count} live runtime${count === 1 ? "" : "s"} · ${namespaces} namespace${namespaces === 1 ? "" : "s"} · as of ${clock(inv.generated_at_ms)}` : state.loading ? "loading…" : "no data yet",
      ),
      h(
        "span",
        { class: "scr-pg-tools" },
        button(state.auto ? "Auto-refresh: on" : "Auto-refresh: off", () => actions.toggleAuto(), { "aria-pressed": state.auto ? "true" : "false" }),
        button(state.loading ? "Refreshing…" : "Refresh", () => actions.refresh(), { disabled: state.loading }),
      ),
    ),
    state.error ? h("div", { class: "scr-pg-alert", role: "alert" }, state.error) : null,
    state.notice ? h("div", { class: "scr-pg-notice", role: "status" }, state.notice) : null,
    inv && inv.vm_check !== "ok" ? h("div", { class: "scr-pg-alert", role: "status" }, `VM liveness unknown: ${inv.vm_check}`) : null,
    inv ? h("div", { class: "scr-pg-panels" }, pool(inv), totals(inv)) : null,
    inv && count === 0 ? h("p", { class: "scr-pg-empty" }, "No live runtimes. Kept runs and registered functions show up here.") : null,
    pager(gp, pages, (p) => actions.setGroupPage(p), "namespace"),
    ...shown.map(([ns, rs]) => group(ns, rs, state, actions, now)),
    pager(gp, pages, (p) => actions.setGroupPage(p), "namespace"),
  );
}

/** Server-side rendering of an inventory (tests, snapshots). */
