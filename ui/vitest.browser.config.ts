// `npm run test:browser`: the built assets in the console-host stand-in, in
// headless Debian Chromium. browser/setup.ts finds it (and skips, saying
// why, when it is missing; tests/ui.rs installs it first when run as root).
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["browser/**/*.test.ts"],
    environment: "node",
    globalSetup: ["browser/setup.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    fileParallelism: false,
  },
});
