/**
 * Every bus id and console id the UI names, in one place: this worker's
 * function ids, the runtimes page's id and the configuration entry it
 * declares. Mirrors the worker's `src/function_ids.rs`.
 */

/** The worker's name: its function-id namespace and its UI's marker. */
export const UI_NAME = "sandbox-code-runner";
export const RUN = `${UI_NAME}::run`;
export const REGISTER_FUNCTION = `${UI_NAME}::register_function`;
export const TEARDOWN = `${UI_NAME}::teardown`;
export const LIST_RUNTIMES = `${UI_NAME}::list_runtimes`;
/** The runtimes page (`#/ext/sandbox-code-runner-runtimes`). */
export const PAGE_ID = `${UI_NAME}-runtimes`;
/** The configuration entry the worker owns, which the page declares. */
export const CONFIGURATION_ID = UI_NAME;
