import { defineConfig } from "vitest/config";

// `npm test`: the cards rendered server-side, redaction properties, the
// tokenizer, and a DOM mount under happy-dom (per-file environment comment).
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    environment: "node",
    testTimeout: 30_000,
  },
});
