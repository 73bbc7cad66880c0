/**
 * The stand-in console's shell: a nav with the chat feed and every page
 * scripts registered; the feed renders each message as a function-trigger
 * card; a page is routed at `#/ext/<id>`, wrapped in its script's scope,
 * under a header that carries the page's configuration action when it
 * declares a `configurationId`.
 */

import * as React from "react";
import type { FunctionTriggerMessage } from "../../src/console";
import { FunctionTriggerCard, ScopedExtension } from "./card";
import { Slot, pages, type RegisteredPage } from "./slots";

const h = React.createElement;

/** The messages the chat feed shows (set by the tests). */
export const feed = new Slot<FunctionTriggerMessage>();

function useHash(): string {
  const [hash, setHash] = React.useState(location.hash);
  React.useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash;
}

function PageView({ entry }: { entry: RegisteredPage }) {
  const { page, scope, path } = entry;
  return h(
    "section",
    { className: "page", "data-page-id": page.id },
    h(
      "header",
      { className: "page-head" },
      h("h1", null, page.title),
      page.configurationId ? h("button", { type: "button", className: "config", "data-configuration-id": page.configurationId }, `Configure ${page.configurationId}`) : null,
    ),
    h(ScopedExtension, { scope, path }, h(page.render as never)),
  );
}

export function App() {
  const hash = useHash();
  const registered: readonly RegisteredPage[] = React.useSyncExternalStore(pages.subscribe, pages.get);
  const messages: readonly FunctionTriggerMessage[] = React.useSyncExternalStore(feed.subscribe, feed.get);
  const pageId = hash.startsWith("#/ext/") ? hash.slice(6) : null;
  const current = pageId ? registered.find((p) => p.page.id === pageId) : undefined;
  return h(
    React.Fragment,
    null,
    h(
      "nav",
      { className: "host-nav" },
      h("strong", null, "console"),
      h("a", { href: "#/chat", "aria-current": pageId ? undefined : "page" }, "Chat"),
      ...registered.map((p) => h("a", { key: p.page.id, href: `#/ext/${p.page.id}`, "aria-current": p.page.id === pageId ? "page" : undefined }, p.page.title)),
    ),
    h(
      "main",
      { className: "host-main" },
      pageId
        ? current
          ? h(PageView, { entry: current })
          : h("p", { "data-page-missing": pageId }, `No page ${pageId}`)
        : h("div", { className: "host-feed" }, ...messages.map((m) => h(FunctionTriggerCard, { key: m.id, message: m }))),
    ),
  );
}
