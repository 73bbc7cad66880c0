/**
 * What `sandbox-code-runner::list_runtimes` answers, and the views of it the
 * runtimes page and the list_runtimes card share: runtimes grouped by
 * namespace (kept runtimes last), durations and clock times.
 */

/** The group key of kept runtimes (they have no namespace). */
export const KEPT = "";

export interface RuntimeEntry {
  handle: string;
  kind: "kept" | "namespace";
  lang: string;
  namespace?: string;
  functions: string[];
  created_at_ms: number;
  last_used_at_ms: number;
  idle_ttl_secs: number;
  reap_at_ms: number;
  executions: number;
  exec_ms: number;
  vm: "alive" | "gone" | "unknown";
}

export interface Inventory {
  generated_at_ms: number;
  runtimes: RuntimeEntry[];
  vm_check: string;
  pool: Record<string, { ready: number; warming: number; target: number }>;
  totals: Record<string, Record<string, number>>;
}

/** `3m 20s`, `2h 5m`, `41s`. */
export function span(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hh = Math.floor(m / 60);
  if (hh < 48) return `${hh}h ${m % 60}m`;
  return `${Math.floor(hh / 24)}d ${hh % 24}h`;
}

/** `14:03:09 UTC`. */
export function clock(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} UTC`;
}

/** Runtimes grouped by namespace (kept runtimes under {@link KEPT}), namespaces sorted, kept last. */
export function groups(inv: Inventory): [string, RuntimeEntry[]][] {
  const by = new Map<string, RuntimeEntry[]>();
  for (const r of inv.runtimes) {
    const key = r.kind === "namespace" ? (r.namespace ?? "?") : KEPT;
    const list = by.get(key);
    if (list) list.push(r);
    else by.set(key, [r]);
  }
  return [...by.entries()].sort(([a], [b]) => (a === KEPT ? 1 : b === KEPT ? -1 : a < b ? -1 : a > b ? 1 : 0));
}

