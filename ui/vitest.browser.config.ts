import { defineConfig } from "vitest/config";

// `npm run test:browser`: the harness page in headless Debian Chromium.
// browser/setup.ts installs Chromium first when it is missing (root only).
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
