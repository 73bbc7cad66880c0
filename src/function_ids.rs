//! Every bus id this worker publishes, binds to or provides, in one place
//! that imports nothing, so any module can name an id without depending on
//! the module that serves it.

/// Run code one-shot or kept.
pub const RUN: &str = "sandbox-code-runner::run";
/// Publish a handler as a bus function.
pub const REGISTER_FUNCTION: &str = "sandbox-code-runner::register_function";
/// Stop a kept runtime or a namespace's runtimes.
pub const TEARDOWN: &str = "sandbox-code-runner::teardown";
/// The operator's inventory of live runtimes (no capability in it).
pub const LIST_RUNTIMES: &str = "sandbox-code-runner::list_runtimes";
/// The recent output of a streamed run, for the holder of its writer ref.
pub const WATCH: &str = "sandbox-code-runner::watch";
/// Internal: what each kind of operation cost on the daemon.
pub const STATS: &str = "sandbox-code-runner::stats";
/// Internal: serves the console assets for the `console:*` triggers.
pub const UI_CONTENT: &str = "sandbox-code-runner::ui-content";
/// Internal: the guest listener's `auth_function_id`.
pub const GUEST_AUTH: &str = "sandbox-code-runner::guest-auth";
/// Internal: the guest listener's `on_function_registration_function_id`.
pub const GUEST_REGISTER: &str = "sandbox-code-runner::guest-register";
/// Internal: the guest listener's `middleware_function_id`.
pub const GUEST_MIDDLEWARE: &str = "sandbox-code-runner::guest-middleware";
/// Internal: the guest listener's `on_trigger_registration_function_id`.
pub const GUEST_TRIGGER: &str = "sandbox-code-runner::guest-trigger";
/// Internal: appends usage guidance to agent system prompts.
pub const GUIDANCE_FN: &str = "sandbox-code-runner::inject-guidance";
/// Internal: receives the configuration worker's changes.
pub const ON_CHANGE_FN: &str = "sandbox-code-runner::on-config-change";
/// The lifecycle trigger type this worker provides.
pub const EVENT_TRIGGER_TYPE: &str = "sandbox-code-runner::event";
/// The agent-prompt hook the guidance binds to (another worker's).
pub const PRE_GENERATE_HOOK: &str = "harness::hook::pre-generate";
