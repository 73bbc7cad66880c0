// A probe asset for the console-host stand-in's own contract: a renderer
// whose redactRaw throws (its raw panes must fail closed to a placeholder),
// and one whose tryRender throws (its card must degrade to a chip naming the
// script). Both claim only probe::* ids.
export default function setup(host) {
  const offs = [
    host.functionTriggers.register({
      id: "probe/host-checks.js#boom",
      isMatch: (id) => id === "probe::boom",
      tryRender: () => null,
      redactRaw: () => {
        throw new Error("redactRaw probe");
      },
    }),
    host.functionTriggers.register({
      id: "probe/host-checks.js#crash",
      isMatch: (id) => id === "probe::crash",
      tryRender: () => {
        throw new Error("tryRender probe");
      },
    }),
  ];
  return () => offs.forEach((off) => off());
}
