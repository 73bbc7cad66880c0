//! Operator-side limits of the daemon double, and the `--sandbox-*` flags that
//! set them. Defaults are the real daemon's, so a double left alone behaves
//! like an unconfigured daemon; tests shrink them to reap or time out in
//! seconds.

/// Limits the double enforces. Defaults match the real daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Live sandboxes allowed at once; `sandbox::create` beyond it is S400.
    pub max_concurrent_sandboxes: usize,
    /// Execs running at once in one sandbox; beyond it S003. 0 acts as 1,
    /// as on the daemon (0 would wedge every sandbox).
    pub max_concurrent_exec_per_sandbox: usize,
    /// Ceiling applied to every exec's `timeout_ms`.
    pub max_exec_timeout_ms: u64,
    /// Idle timeout of a sandbox created without `idle_timeout_secs`.
    pub default_idle_timeout_secs: u64,
    /// How often the reaper scans for idle sandboxes.
    pub reaper_interval_ms: u64,
    /// Modelled guest boot time, paid by the first exec / fs call into a new
    /// sandbox (the real `create` answers before the guest has booted).
    pub boot_delay_ms: u64,
    /// Grace between SIGTERM and SIGKILL on stop; the daemon's is a fixed
    /// 200 ms and every stop pays it, so latency figures stay honest.
    pub stop_grace_ms: u64,
    /// What a `network:true` guest's traffic beyond the gateway meets: the
    /// host's network, or nothing (a package index out of reach).
    pub package_route: PackageRoute,
}

/// The route a `network:true` guest has past the gateway (the host's
/// 127.0.0.1, where the engine is), set per case: the daemon's VMs reach
/// whatever the host reaches, and a host without a route to PyPI or npm is
/// common (an air-gapped CI, a proxy the VM does not know).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PackageRoute {
    /// Out through the host, as the daemon's VMs go.
    #[default]
    Open,
    /// Nowhere: every packet but the gateway's is sent towards a next hop
    /// that never answers, so a name lookup or a connection to a package
    /// index fails only after its timeouts (about 3 s each), as behind a
    /// firewall that drops it. Needs slirp4netns (`network::unmodelled`).
    Unreachable,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            max_concurrent_sandboxes: 32,
            max_concurrent_exec_per_sandbox: 4,
            max_exec_timeout_ms: 300_000,
            default_idle_timeout_secs: 300,
            reaper_interval_ms: 10_000,
            boot_delay_ms: 0,
            stop_grace_ms: 200,
            package_route: PackageRoute::Open,
        }
    }
}

/// Command-line flags that set [`SandboxLimits`].
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct SandboxArgs {
    /// Maximum live sandboxes (the daemon's max_concurrent_sandboxes).
    #[arg(long = "sandbox-capacity", default_value_t = 32)]
    pub(crate) capacity: usize,
    /// Concurrent execs per sandbox (the daemon's max_concurrent_exec_per_sandbox).
    #[arg(long = "sandbox-exec-cap", default_value_t = 4)]
    pub(crate) exec_cap: usize,
    /// Ceiling on every exec's timeout_ms.
    #[arg(long = "sandbox-max-exec-timeout-ms", default_value_t = 300_000)]
    pub(crate) max_exec_timeout_ms: u64,
    /// Idle timeout of sandboxes created without idle_timeout_secs.
    #[arg(long = "sandbox-idle-timeout-secs", default_value_t = 300)]
    pub(crate) idle_timeout_secs: u64,
    /// Interval of the idle reaper's scan.
    #[arg(long = "sandbox-reaper-interval-ms", default_value_t = 10_000)]
    pub(crate) reaper_interval_ms: u64,
    /// Modelled guest boot time, paid by the first exec/fs call of a sandbox.
    #[arg(long = "sandbox-boot-delay-ms", default_value_t = 0)]
    pub(crate) boot_delay_ms: u64,
    /// Grace between SIGTERM and SIGKILL when a sandbox stops.
    #[arg(long = "sandbox-stop-grace-ms", default_value_t = 200)]
    pub(crate) stop_grace_ms: u64,
}

impl SandboxArgs {
    /// The limits these flags describe.
    pub(crate) fn limits(&self) -> SandboxLimits {
        SandboxLimits {
            max_concurrent_sandboxes: self.capacity,
            max_concurrent_exec_per_sandbox: self.exec_cap,
            max_exec_timeout_ms: self.max_exec_timeout_ms,
            default_idle_timeout_secs: self.idle_timeout_secs,
            reaper_interval_ms: self.reaper_interval_ms,
            boot_delay_ms: self.boot_delay_ms,
            stop_grace_ms: self.stop_grace_ms,
            package_route: PackageRoute::Open,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        sandbox: SandboxArgs,
    }

    #[test]
    fn flag_defaults_are_the_daemons() {
        let cli = Cli::parse_from(["x"]);
        assert_eq!(cli.sandbox.limits(), SandboxLimits::default());
    }

    #[test]
    fn every_flag_lands_in_its_limit() {
        let cli = Cli::parse_from([
            "x",
            "--sandbox-capacity",
            "2",
            "--sandbox-exec-cap",
            "1",
            "--sandbox-max-exec-timeout-ms",
            "900",
            "--sandbox-idle-timeout-secs",
            "1",
            "--sandbox-reaper-interval-ms",
            "200",
            "--sandbox-boot-delay-ms",
            "50",
            "--sandbox-stop-grace-ms",
            "10",
        ]);
        assert_eq!(
            cli.sandbox.limits(),
            SandboxLimits {
                max_concurrent_sandboxes: 2,
                max_concurrent_exec_per_sandbox: 1,
                max_exec_timeout_ms: 900,
                default_idle_timeout_secs: 1,
                reaper_interval_ms: 200,
                boot_delay_ms: 50,
                stop_grace_ms: 10,
                package_route: PackageRoute::Open,
            }
        );
    }
}
