// `npm test`: the cards from the fixtures, redaction properties, the
// tokenizer, a DOM mount and setup(host) under happy-dom (per-file
// environment comment), and import() of each built asset.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    environment: "node",
    testTimeout: 30_000,
  },
});
