export const UI_DIR: string;
export const FIXTURES_DIR: string;
export function startServer(options?: { port?: number; dist?: string }): Promise<{ url: string; close(): Promise<void> }>;
