// Types of harness/serve.mjs (the console-host stand-in's server) for the TypeScript tests.
export const UI_DIR: string;
export const FIXTURES_DIR: string;
export const WORKER_ASSETS: [string, string, "script" | "style"][];
export function startServer(options?: { port?: number; dist?: string }): Promise<{ url: string; close(): Promise<void> }>;
