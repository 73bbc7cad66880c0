// A probe asset for the console-host stand-in: the shape cards.js had before
// it became an ES module (a classic script that pushes entries onto a global
// queue and exports nothing). The loader must refuse it: no default setup().
(() => {
  const queue = (globalThis.__iiiConsoleUi = globalThis.__iiiConsoleUi || []);
  queue.push({ ui: "legacy", function_id: "sandbox-code-runner::run" });
})();
