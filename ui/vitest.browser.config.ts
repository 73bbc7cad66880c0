// `npm run test:browser`: the built assets in the console-host stand-in, in
// headless Debian Chromium. browser/setup.ts installs Chromium first when it
// is missing (root only).
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
