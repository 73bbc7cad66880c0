/**
 * The stand-in console's UI loader, after the one in iii-hq/workers
 * (console/web/src/lib/ui-loader.tsx): a `console:script` asset is imported
 * with `import()` of `ui/<path>?v=<hash>`; a module whose default export is
 * not a function fails with "no default setup() export" and nothing of it is
 * kept; `setup(host)` gets a host whose registrars are tracked, and a
 * returned teardown is kept too; reloading (a new hash), deleting or a sync
 * that no longer lists the asset disposes all of it, last in first out.
 * Styles are `<link>`s, applied before scripts in a sync.
 */

import type { Host } from "../../src/console";
import { iii } from "./iii";
import { pages, renderers } from "./slots";

export interface AssetRef {
  path: string;
  kind: "script" | "style";
  hash: string;
}

interface Loaded {
  ref: AssetRef;
  cleanups: (() => void)[];
  link?: HTMLLinkElement;
}

const loaded = new Map<string, Loaded>();
/** What the loader logged as failures, for the tests (it also goes to console.error). */
export const loadErrors: string[] = [];

function assetUrl(path: string, hash: string): string {
  return new URL(`ui/${path}?v=${hash}`, new URL(".", document.baseURI)).href;
}

function makeHost(path: string, cleanups: (() => void)[]): Host {
  const scope = path.split("/")[0] as string;
  const track = (off: () => void): (() => void) => {
    cleanups.push(off);
    return off;
  };
  return {
    iii,
    path,
    pages: { register: (page) => track(pages.add({ page, scope, path })) },
    functionTriggers: { register: (renderer) => track(renderers.add({ renderer, scope, path })) },
  };
}

function runCleanups(cleanups: (() => void)[], path: string): void {
  for (const off of [...cleanups].reverse()) {
    try {
      off();
    } catch (err) {
      console.error(`[iii-ui] cleanup for ${path} threw`, err);
    }
  }
}

export function dispose(path: string): void {
  const entry = loaded.get(path);
  if (!entry) return;
  loaded.delete(path);
  entry.link?.remove();
  runCleanups(entry.cleanups, path);
}

async function applyScript(ref: AssetRef): Promise<void> {
  dispose(ref.path);
  const cleanups: (() => void)[] = [];
  try {
    const mod = (await import(/* @vite-ignore */ assetUrl(ref.path, ref.hash))) as { default?: unknown };
    if (typeof mod.default !== "function") throw new Error("no default setup() export");
    const teardown = await (mod.default as (host: Host) => unknown)(makeHost(ref.path, cleanups));
    if (typeof teardown === "function") cleanups.push(teardown as () => void);
    loaded.set(ref.path, { ref, cleanups });
  } catch (err) {
    runCleanups(cleanups, ref.path);
    const text = `[iii-ui] failed to load ${ref.path}@${ref.hash}: ${err instanceof Error ? err.message : String(err)}`;
    loadErrors.push(text);
    console.error(text);
  }
}

function applyStyle(ref: AssetRef): void {
  dispose(ref.path);
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.dataset.iiiUiAsset = ref.path;
  link.href = assetUrl(ref.path, ref.hash);
  document.head.appendChild(link);
  loaded.set(ref.path, { ref, cleanups: [], link });
}

/** A new or changed asset: applied; the same hash again: nothing. */
export async function set(ref: AssetRef): Promise<void> {
  if (loaded.get(ref.path)?.ref.hash === ref.hash) return;
  if (ref.kind === "style") applyStyle(ref);
  else await applyScript(ref);
}

/** The full list of assets: what is gone is disposed, styles load before scripts. */
export async function sync(assets: AssetRef[]): Promise<void> {
  const listed = new Set(assets.map((a) => a.path));
  for (const path of [...loaded.keys()]) if (!listed.has(path)) dispose(path);
  const ordered = [...assets].sort((a, b) => (a.kind === b.kind ? 0 : a.kind === "style" ? -1 : 1));
  for (const a of ordered) await set(a);
}

/** Paths loaded now, with their hashes. */
export function loadedAssets(): AssetRef[] {
  return [...loaded.values()].map((l) => l.ref);
}

/** Every stylesheet link is in (loaded or failed), so a screenshot is styled. */
export async function stylesSettled(): Promise<void> {
  const links = [...loaded.values()].flatMap((l) => (l.link ? [l.link] : []));
  await Promise.all(
    links.map((link) =>
      link.sheet
        ? Promise.resolve()
        : new Promise<void>((done) => {
            link.addEventListener("load", () => done(), { once: true });
            link.addEventListener("error", () => done(), { once: true });
          }),
    ),
  );
}
