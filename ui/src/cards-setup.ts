/**
 * Entry of `cards.js`, a `console:script` asset (an ES module): its default
 * export is the console's `setup(host)`. It takes the console's shared React,
 * registers one function-trigger renderer per operation through
 * `host.functionTriggers.register`, and returns the teardown that unregisters
 * them. It writes no globals.
 */

import { sharedReact, type Host } from "./console";
import { UI_NAME } from "./frame";
import { createRenderers } from "./renderers";

export default async function setup(host: Host): Promise<() => void> {
  const React = await sharedReact("cards.js");
  if (typeof host?.functionTriggers?.register !== "function") {
    const text = `[${UI_NAME}] cards.js: this console's host has no functionTriggers.register; no card is registered.`;
    console.error(text);
    throw new Error(text);
  }
  // A running streamed run's card polls its output through the tab's engine client.
  const iii = host.iii;
  const trigger = typeof iii?.trigger === "function" ? iii.trigger.bind(iii) : undefined;
  const offs = createRenderers(React, { trigger }).map((renderer) => host.functionTriggers.register(renderer));
  return () => {
    for (const off of offs.reverse()) off();
  };
}
