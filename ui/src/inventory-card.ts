/**
 * The card of a `sandbox-code-runner::list_runtimes` call: how many runtimes
 * are live, grouped by namespace (kept runtimes last), a bounded table of
 * them by handle, and the warm pool. The whole inventory, paged and with
 * teardown, is the runtimes page's job; the card points there.
 */

import type { CardContext } from "./cards";
import { badge, fieldRow, frame, mono, record, section, unsettledVerdict, type Invocation, type Verdict } from "./frame";
import { KEPT, groups, span, type Inventory, type RuntimeEntry } from "./inventory";
import { h, type Child, type VElement } from "./vnode";

/** Rows the card shows at most, over all groups. */
export const CARD_ROWS = 10;
/** Where the console routes the runtimes page. */
export const PAGE_HREF = "#/ext/sandbox-code-runner-runtimes";

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** The answer read as an inventory, or null when it is not one. */
function inventoryOf(output: unknown): Inventory | null {
  const o = record(output);
  if (!Array.isArray(o.runtimes)) return null;
  const runtimes = o.runtimes.filter((r): r is RuntimeEntry => {
    const e = record(r);
    return typeof e.handle === "string" && (e.kind === "kept" || e.kind === "namespace");
  });
  return {
    generated_at_ms: typeof o.generated_at_ms === "number" ? o.generated_at_ms : Date.now(),
    runtimes: runtimes.map((r) => ({ ...r, functions: Array.isArray(r.functions) ? r.functions.filter((f) => typeof f === "string") : [] })),
    vm_check: typeof o.vm_check === "string" ? o.vm_check : "unknown",
    pool: record(o.pool) as Inventory["pool"],
    totals: record(o.totals) as Inventory["totals"],
  };
}

function table(inv: Inventory): { rows: VElement; shown: number } {
  const now = inv.generated_at_ms;
  const rows: VElement[] = [];
  let shown = 0;
  for (const [ns, rs] of groups(inv)) {
    if (shown >= CARD_ROWS) break;
    rows.push(h("tr", { class: "scr-inv-group" }, h("th", { colspan: 5, scope: "rowgroup" }, ns === KEPT ? "kept runtimes" : ns, h("span", { class: "scr-inv-count" }, ` · ${rs.length}`))));
    for (const r of rs.slice(0, CARD_ROWS - shown)) {
      shown += 1;
      rows.push(
        h(
          "tr",
          { "data-handle": r.handle },
          h("td", { class: "scr-inv-mono" }, r.handle),
          h("td", null, r.lang),
          h("td", { class: "scr-inv-num" }, plural(r.functions.length, "function")),
          h("td", { class: "scr-inv-num" }, `idle ${span(now - r.last_used_at_ms)}`),
          h("td", null, h("span", { class: `scr-inv-vm is-${r.vm}` }, r.vm)),
        ),
      );
    }
  }
  return { rows: h("table", { class: "scr-inv-table" }, h("tbody", null, ...rows)), shown };
}

function poolLine(inv: Inventory): Child {
  const langs = Object.entries(inv.pool ?? {});
  if (langs.length === 0) return null;
  return fieldRow(
    "warm pool",
    langs.map(([lang, p], i) => [i ? " · " : "", mono(lang), ` ${record(p).ready ?? 0} ready`, record(p).warming ? `, ${record(p).warming} warming` : ""]),
  );
}

export function renderInventory(inv: Invocation, _ctx: CardContext): VElement {
  const inventory = inventoryOf(inv.output);
  let verdict: Verdict;
  const sections: Child[] = [];
  const unsettled = unsettledVerdict(inv);
  if (unsettled) verdict = unsettled;
  else if (!inventory) verdict = { tone: "warn", headline: "Not an inventory", detail: "The answer has no runtimes list; see the raw JSON." };
  else {
    const all = groups(inventory);
    const namespaces = all.filter(([ns]) => ns !== KEPT).length;
    const kept = inventory.runtimes.filter((r) => r.kind === "kept").length;
    const gone = inventory.runtimes.filter((r) => r.vm === "gone").length;
    verdict = {
      tone: inventory.vm_check === "ok" && gone === 0 ? "ok" : "warn",
      headline: plural(inventory.runtimes.length, "live runtime"),
      facts: [plural(namespaces, "namespace"), plural(kept, "kept runtime"), gone ? `${gone} VM gone` : null],
      detail: inventory.vm_check === "ok" ? null : `VM liveness unknown: ${inventory.vm_check}`,
    };
    sections.push(h("div", { class: "scr-fields" }, poolLine(inventory)));
    if (inventory.runtimes.length > 0) {
      const { rows, shown } = table(inventory);
      const more = inventory.runtimes.length - shown;
      sections.push(
        section(
          "Runtimes",
          more > 0 ? `${shown} of ${inventory.runtimes.length}` : String(shown),
          rows,
          h("p", { class: "scr-more" }, more > 0 ? `… ${plural(more, "more runtime")}: ` : "Every runtime, paged and with teardown: ", h("a", { href: PAGE_HREF }, "the Sandbox runtimes page"), "."),
        ),
      );
    } else sections.push(h("p", { class: "scr-empty" }, "No live runtimes. Kept runs and registered functions show up here."));
  }
  return frame({ fn: "list_runtimes", title: "list_runtimes", badges: [badge("inventory", "mode")], verdict, sections });
}
