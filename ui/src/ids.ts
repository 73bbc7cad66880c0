/**
 * Every bus id and console id the UI names, in one place: this worker's
 * function ids, the runtimes page's id and the configuration entry it
 * declares. Mirrors the worker's `src/function_ids.rs`; written out in full
 * so the built bundle carries each id verbatim.
 */

/** The worker's name: its function-id namespace and its UI's marker. */
export const UI_NAME = "sandbox-code-runner";
export const RUN = "sandbox-code-runner::run";
export const REGISTER_FUNCTION = "sandbox-code-runner::register_function";
export const TEARDOWN = "sandbox-code-runner::teardown";
export const LIST_RUNTIMES = "sandbox-code-runner::list_runtimes";
/** A streamed run's recent output, for the holder of its writer ref (a running run's card). */
export const WATCH = "sandbox-code-runner::watch";
/** The runtimes page (`#/ext/sandbox-code-runner-runtimes`). */
export const PAGE_ID = "sandbox-code-runner-runtimes";
/** The configuration entry the worker owns, which the page declares. */
export const CONFIGURATION_ID = UI_NAME;
