/**
 * Boot of the console-host stand-in's tab: the shared React goes on
 * `window.__III_CONSOLE__` (unless the page is opened with `?react=absent`,
 * to see scripts fail without it), the shell renders, and `window.__console`
 * is what the browser tests drive: load assets, show messages, read what the
 * host registered, logged, copied and was called with.
 */

import * as React from "react";
import * as ReactDOM from "react-dom";
import * as ReactDOMClient from "react-dom/client";
import * as JsxRuntime from "react/jsx-runtime";
import type { FunctionTriggerMessage } from "../../src/console";
import { App, feed } from "./app";
import { copied } from "./card";
import { calls, iii, setInventory, setWatchScript } from "./iii";
import { dispose, loadErrors, loadedAssets, set, stylesSettled, sync, type AssetRef } from "./loader";
import { pages, renderers } from "./slots";

const withReact = new URLSearchParams(location.search).get("react") !== "absent";
(window as unknown as { __III_CONSOLE__: unknown }).__III_CONSOLE__ = {
  React: withReact ? React : undefined,
  ReactDOM,
  ReactDOMClient,
  JsxRuntime,
  api: { iii, components: {}, useTheme: () => document.documentElement.dataset.theme ?? "light", tokens: [] },
};

// Loader events apply in order, one at a time, as the console's do.
let queue: Promise<void> = Promise.resolve();
function enqueue(work: () => Promise<void> | void): Promise<void> {
  queue = queue.then(work).catch((err) => console.error("[iii-ui] loader event failed", err));
  return queue;
}

const api = {
  sync: (assets: AssetRef[]) => enqueue(() => sync(assets)),
  set: (asset: AssetRef) => enqueue(() => set(asset)),
  remove: (path: string) => enqueue(() => dispose(path)),
  loaded: () => loadedAssets(),
  loadErrors,
  renderers: () => renderers.get().map(({ renderer, scope, path }) => ({ id: renderer.id, scope, path, redactRaw: typeof renderer.redactRaw === "function" })),
  pages: () => pages.get().map(({ page, scope, path }) => ({ id: page.id, title: page.title, configurationId: page.configurationId ?? null, scope, path })),
  show: (messages: FunctionTriggerMessage[]) => feed.replace(messages),
  stylesSettled,
  copied,
  calls,
  setInventory,
  setWatchScript,
};
(window as unknown as { __console: typeof api }).__console = api;

ReactDOMClient.createRoot(document.getElementById("app") as HTMLElement).render(React.createElement(App));
document.body.dataset.ready = "true";
