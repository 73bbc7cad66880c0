/**
 * Global setup of the browser test: finds the Chromium to drive.
 *
 * /usr/bin/chromium, or the binary `SCR_CHROMIUM` names. This setup never
 * installs anything: every browser test file runs its own vitest, and two
 * `apt-get install`s at once lose dpkg's lock to each other. The cargo test
 * (tests/ui.rs) installs Debian's chromium when it is missing and runs as
 * root, once across its test processes, before it starts vitest; here a
 * missing browser skips the test with the reason printed.
 */
import { existsSync } from "node:fs";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    chromium: string | null;
    chromiumSkipReason: string;
  }
}

export const CHROMIUM = process.env.SCR_CHROMIUM ?? "/usr/bin/chromium";

function findChromium(): { path: string | null; reason: string } {
  if (existsSync(CHROMIUM)) return { path: CHROMIUM, reason: "" };
  if (process.env.SCR_CHROMIUM) return { path: null, reason: `SCR_CHROMIUM=${CHROMIUM} does not exist` };
  return {
    path: null,
    reason: `${CHROMIUM} is missing: apt-get install -y chromium, or run the browser tests as root through cargo (cargo nextest run --test ui), which installs it`,
  };
}

export default function setup(project: TestProject): void {
  const { path, reason } = findChromium();
  if (!path) console.log(`browser test SKIPPED: ${reason}`);
  project.provide("chromium", path);
  project.provide("chromiumSkipReason", reason);
}
