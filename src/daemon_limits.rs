//! The daemon's numbers the worker depends on, in one table that says
//! where each came from. The daemon does not report its configuration over
//! `sandbox::*`, so these are its defaults as measured and read in
//! iii-sandbox (`docs/sandbox.md`); an operator who changes them on the
//! daemon changes them here. No other file states a daemon number
//! (`tests/layering.rs` checks).

/// One daemon number and where it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit<T> {
    pub(crate) value: T,
    /// The daemon's name for it, or the behaviour it was measured from.
    pub(crate) source: &'static str,
}

/// The numbers of the daemon this worker is configured for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DaemonLimits {
    /// Each exec stream is cut here silently (no flag in the answer).
    pub(crate) stream_cap_bytes: Limit<usize>,
    /// An exec's `timeout_ms` is clamped to this.
    pub(crate) max_exec_timeout_ms: Limit<u64>,
    /// Execs in flight at once in one sandbox; the next is refused (S003).
    pub(crate) max_execs_per_sandbox: Limit<usize>,
    /// Live sandboxes at once; the next create is refused (S400). The
    /// default of the worker's `daemon_max_sandboxes` setting.
    pub(crate) max_sandboxes: Limit<usize>,
}

impl DaemonLimits {
    /// Each limit's name and where it came from, for the boot log.
    pub(crate) fn sources(&self) -> [(&'static str, &'static str); 4] {
        [
            ("stream_cap_bytes", self.stream_cap_bytes.source),
            ("max_exec_timeout_ms", self.max_exec_timeout_ms.source),
            ("max_execs_per_sandbox", self.max_execs_per_sandbox.source),
            ("max_sandboxes", self.max_sandboxes.source),
        ]
    }
}

/// iii-sandbox's defaults (docs/sandbox.md, "exec" and "stop").
pub(crate) const DAEMON: DaemonLimits = DaemonLimits {
    stream_cap_bytes: Limit {
        value: 1 << 20,
        source: "exec output: each stream decoded lossily and cut at 1 MiB, unflagged",
    },
    max_exec_timeout_ms: Limit {
        value: 300_000,
        source: "max_exec_timeout_ms (default 300000)",
    },
    max_execs_per_sandbox: Limit {
        value: 4,
        source: "max_concurrent_exec_per_sandbox (default 4)",
    },
    max_sandboxes: Limit {
        value: 32,
        source: "max_concurrent_sandboxes (default 32)",
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_says_where_it_came_from() {
        let sources = DAEMON.sources();
        assert!(sources.iter().all(|(_, s)| s.len() > 10), "{sources:?}");
    }
}
