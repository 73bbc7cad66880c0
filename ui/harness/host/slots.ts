/**
 * The stand-in console's slots: the function-trigger renderers and the pages
 * scripts registered (each registration returns its unregister function,
 * idempotent), observable by React; and `rawRedactor`, the one place
 * `redactRaw` is chosen: the first renderer that both declares it and claims
 * the function id.
 */

import type { FunctionTriggerRenderer, PageRegistration } from "../../src/console";

export interface RegisteredRenderer {
  renderer: FunctionTriggerRenderer;
  /** First segment of the script's path: the `data-iii-ui` of its renders. */
  scope: string;
  path: string;
}

export interface RegisteredPage {
  page: PageRegistration;
  scope: string;
  path: string;
}

type Listener = () => void;

/** A list that scripts add to and remove from, observable by React (useSyncExternalStore). */
export class Slot<T> {
  private items: readonly T[] = [];
  private readonly listeners = new Set<Listener>();

  add(item: T): () => void {
    this.items = [...this.items, item];
    this.emit();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.items = this.items.filter((x) => x !== item);
      this.emit();
    };
  }

  /** Everything at once (the chat feed's messages). */
  replace(items: readonly T[]): void {
    this.items = [...items];
    this.emit();
  }

  get = (): readonly T[] => this.items;

  subscribe = (f: Listener): (() => void) => {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  };

  private emit(): void {
    for (const f of [...this.listeners]) f();
  }
}

export const renderers = new Slot<RegisteredRenderer>();
export const pages = new Slot<RegisteredPage>();

/** `isMatch` fenced: a throw claims nothing. */
export function claims(r: FunctionTriggerRenderer, functionId: string): boolean {
  try {
    return r.isMatch(functionId) === true;
  } catch {
    return false;
  }
}

/** The redactor of a call's raw panes, or undefined when no claiming renderer declares one. */
export function rawRedactor(list: readonly FunctionTriggerRenderer[], functionId: string): ((v: unknown) => unknown) | undefined {
  for (const r of list) {
    if (typeof r.redactRaw === "function" && claims(r, functionId)) {
      const redact = r.redactRaw.bind(r);
      return (v) => redact(v);
    }
  }
  return undefined;
}
