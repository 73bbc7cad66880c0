//! The answers a draft profile falls back on where the live worker shows
//! nothing: seed 000's, and, where seed 000 leaves a value open, the
//! suite's own contract (docs/contract.md) — each marked with where it
//! comes from, so the author sees what to check.

/// Seed 000's answer for features it settles: `(feature, value, sentence)`.
pub(super) const SEED_DEFAULTS: &[(&str, &str, &str)] = &[
    (
        "network",
        "true",
        "seed 000 Running code: every VM has outbound network",
    ),
    (
        "package_install",
        "true",
        "seed 000 Running code: npm install / pip install work in every runtime",
    ),
    (
        "real_filesystem",
        "true",
        "seed 000: a real OS per call; files survive on a kept runtime",
    ),
    (
        "globals_persist_on_keep",
        "false",
        "seed 000 Running code: variables do not survive between runs",
    ),
    (
        "handler_globals_persist",
        "false",
        "seed 000: each call runs in a fresh interpreter process",
    ),
    (
        "sandbox_daemon",
        "true",
        "seed 000: every execution is delegated to the iii-sandbox daemon",
    ),
    (
        "guest_sdk",
        "real_sdk",
        "seed 000 The iii global: the real iii-sdk client",
    ),
    (
        "guest_register_function",
        "true",
        "seed 000 The iii global: the full SDK surface",
    ),
    (
        "guest_python_iii",
        "true",
        "seed 000 The iii global: python runtimes pip install iii-sdk once",
    ),
    (
        "self_call_stalls",
        "true",
        "seed 000 The iii global: self-calls stall",
    ),
    (
        "one_runtime_per_namespace_lang",
        "true",
        "seed 000: one persistent runtime per namespace and language",
    ),
    (
        "teardown_by_namespace",
        "true",
        "seed 000 Teardown and expiry",
    ),
    ("capacity", "true", "seed 000 Errors: capacity"),
    (
        "non_json_return_is_handler_error",
        "true",
        "seed 000 Errors: handler_error",
    ),
    (
        "resource_exhausted",
        "false",
        "seed 000 Errors: no resource_exhausted code",
    ),
    (
        "reregister",
        "refused",
        "seed 000 Errors: invalid_request — id already taken",
    ),
    (
        "inject_guidance_hook",
        "true",
        "seed 000 Configuration: inject_guidance (ON by default) appends the guidance via the harness pre-generate hook",
    ),
    (
        "file_config",
        "true",
        "seed 000 Configuration: default_timeout_ms, max_timeout_ms, idle_ttl_secs in the worker's config file",
    ),
    (
        "secret_redaction",
        "true",
        "seed 000 Running code: the runtime_id is a secret",
    ),
    (
        "unknown_fields_ignored",
        "true",
        "seed 000 Running code: a request still carrying the old network field is ignored harmlessly",
    ),
    (
        "vm_ownership",
        "false",
        "seed 000 Teardown and expiry: there is no drain-on-shutdown; an orphaned VM runs until its idle TTL",
    ),
    (
        "langs",
        "[node, python]",
        "seed 000: Node.js and Python",
    ),
    ("python", "true", "seed 000: Python"),
    ("node", "true", "seed 000: Node.js"),
    (
        "keep",
        "true",
        "seed 000 Running code: keep=true leaves the VM running",
    ),
    (
        "runtime_id_format",
        "rt-uuid-v4",
        "seed 000 Running code: runtime_id rt-…",
    ),
    (
        "failed_keep_returns_runtime_id",
        "false",
        "seed 000 Running code: a kept run's runtime_id addresses a VM left running",
    ),
    (
        "result_cap_bytes",
        "false",
        "seed 000: no `result` field, so no result cap",
    ),
    (
        "namespace_charset",
        "\"[a-z0-9._-]\"",
        "seed 000 names namespace violations; the charset is the documented workers'",
    ),
    (
        "python_code",
        "main_script",
        "seed 000: Python code is a script",
    ),
    (
        "node_code",
        "es_module",
        "seed 000: Node code is a module (top-level await)",
    ),
];

/// docs/contract.md's answer where seed 000 is silent and nothing can be
/// seen from outside (the worker's behaviour on a config file the probe
/// cannot give it): `(feature, value, sentence)`.
pub(super) const CONTRACT_DEFAULTS: &[(&str, &str, &str)] = &[
    (
        "unknown_config_keys_refused",
        "true",
        "docs/contract.md Configuration: unknown keys are an error at boot, with the key named",
    ),
    (
        "timeout_clamp_default_path",
        "true",
        "docs/contract.md run: default_timeout_ms is clamped to max_timeout_ms too",
    ),
];
