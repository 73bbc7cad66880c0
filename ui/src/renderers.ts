/**
 * The function-trigger renderers `cards.js` registers: one per operation
 * (`run`, `register_function`, `teardown`, `list_runtimes`), each claiming
 * exactly its own function id, answering a React node built with the
 * console's React (or null to fall through), and declaring `redactRaw` so
 * the console's raw-JSON pane and its copy button never show a full
 * runtime_id.
 */

import { KINDS, type CardKind } from "./cards";
import type { FunctionTriggerMessage, FunctionTriggerRenderer, ReactApi, ReactNode } from "./console";
import { UI_ATTR, UI_NAME } from "./frame";
import { invocationOf } from "./message";
import { redactRaw } from "./redact";
import { cardOf, mountCard, type Card, type MountOptions } from "./render";

/** `sandbox-code-runner::run` for `run`. */
export function functionIdOf(kind: CardKind): string {
  return `${UI_NAME}::${kind}`;
}

/** A renderer's id, after the console's `<path>#<name>` convention. */
export function rendererIdOf(kind: CardKind): string {
  return `${UI_NAME}/cards.js#${kind}`;
}

interface CardProps {
  card: Card;
  options: MountOptions;
}

/**
 * The React component every renderer answers with: an element the card is
 * mounted into before the browser paints, and unmounted from when React
 * drops it. React owns the element, the card owns its content, so the
 * card's click handlers (the runtime chip) work the same in every host.
 */
function cardComponent(React: ReactApi): (props: CardProps) => ReactNode {
  return function SandboxCodeRunnerCard({ card, options }: CardProps): ReactNode {
    const ref = React.useRef<Element | null>(null);
    React.useLayoutEffect(() => (ref.current ? mountCard(ref.current, card, options) : undefined), [card, options]);
    return React.createElement("div", { ref, [UI_ATTR]: UI_NAME, "data-scr-card-host": "" });
  };
}

/** The renderers, in registration order, built on the console's `React`. */
export function createRenderers(React: ReactApi, options: MountOptions = {}): FunctionTriggerRenderer[] {
  const Card = cardComponent(React);
  // One element per message and reading: the host re-renders a message
  // without changing it, and the card must not be mounted again each time.
  const cache = new WeakMap<object, { running: boolean; node: ReactNode | null }>();
  return KINDS.map((kind) => {
    const functionId = functionIdOf(kind);
    const render = (message: FunctionTriggerMessage, running: boolean): ReactNode | null => {
      if (!message || typeof message !== "object" || message.functionId !== functionId) return null;
      // An approval prompt is the console's own card.
      if (message.pendingApproval === true) return null;
      const hit = cache.get(message);
      if (hit && hit.running === running) return hit.node;
      const inv = invocationOf(message, running);
      const card = inv ? cardOf(inv) : null;
      const node = card ? React.createElement(Card, { card, options }) : null;
      cache.set(message, { running, node });
      return node;
    };
    return {
      id: rendererIdOf(kind),
      isMatch: (id: string) => id === functionId,
      tryRender: (message: FunctionTriggerMessage) => render(message, message?.running === true),
      tryRenderRunning: (message: FunctionTriggerMessage) => render(message, true),
      redactRaw: (value: unknown) => redactRaw(value),
    };
  });
}
