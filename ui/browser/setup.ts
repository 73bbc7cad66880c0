/**
 * Global setup of the browser test: makes sure Debian's Chromium is there.
 *
 * Missing /usr/bin/chromium is installed with apt-get when running as root
 * (CI, fresh machines); otherwise the test is skipped with the reason printed.
 * `SCR_CHROMIUM` points at another binary.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    chromium: string | null;
    chromiumSkipReason: string;
  }
}

export const CHROMIUM = process.env.SCR_CHROMIUM ?? "/usr/bin/chromium";

function apt(args: string[]): void {
  execFileSync("apt-get", args, {
    stdio: "inherit",
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    timeout: 600_000,
  });
}

function ensureChromium(): { path: string | null; reason: string } {
  if (existsSync(CHROMIUM)) return { path: CHROMIUM, reason: "" };
  if (process.env.SCR_CHROMIUM) return { path: null, reason: `SCR_CHROMIUM=${CHROMIUM} does not exist` };
  const root = typeof process.getuid === "function" && process.getuid() === 0;
  if (!root) return { path: null, reason: `${CHROMIUM} is missing and installing it needs root (apt-get install -y chromium)` };
  console.log(`browser test: ${CHROMIUM} is missing; installing Debian's chromium with apt-get`);
  try {
    apt(["install", "-y", "-qq", "chromium"]);
  } catch {
    apt(["update", "-qq"]);
    apt(["install", "-y", "-qq", "chromium"]);
  }
  return existsSync(CHROMIUM) ? { path: CHROMIUM, reason: "" } : { path: null, reason: `apt-get ran but ${CHROMIUM} is still missing` };
}

export default function setup(project: TestProject): void {
  const { path, reason } = ensureChromium();
  if (!path) console.log(`browser test SKIPPED: ${reason}`);
  project.provide("chromium", path);
  project.provide("chromiumSkipReason", reason);
}
