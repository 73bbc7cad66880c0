//! The per-operation totals an operator reads (`stats`, `list_runtimes`):
//! one [`OpTotals`] per kind of operation, and their JSON view.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::Value;

use crate::metering::OpTotals;

/// Per-operation cost totals: what each kind of operation spent on the daemon.
#[derive(Default)]
pub struct Stats {
    pub run: Arc<OpTotals>,
    pub register_function: Arc<OpTotals>,
    pub teardown: Arc<OpTotals>,
    pub handler_call: Arc<OpTotals>,
    /// Warm-pool refills, which no caller waits for.
    pub pool: Arc<OpTotals>,
    /// `list_runtimes`: one `sandbox::list` each.
    pub inventory: Arc<OpTotals>,
    /// The boot's orphan sweep: one `sandbox::list`, a stop per orphan.
    pub sweep: Arc<OpTotals>,
    /// The shutdown: a stop per VM.
    pub shutdown: Arc<OpTotals>,
}

impl Stats {
    /// `{op: {ops, sandbox_calls, bytes_planted}}`.
    pub fn to_json(&self) -> Value {
        let one = |t: &OpTotals| {
            let (ops, calls, bytes) = t.snapshot();
            serde_json::json!({
                "ops": ops,
                "sandbox_calls": calls,
                "bytes_planted": bytes,
                "worker_added_us_mean": (t.added_us_mean() * 10.0).round() / 10.0,
                "total_ns": t.total_nanos.load(Ordering::Relaxed),
                "sandbox_ns": t.sandbox_nanos.load(Ordering::Relaxed),
                "sdk_pip_installs": t.sdk_pip_installs.load(Ordering::Relaxed),
                "sdk_install_ns": t.sdk_install_nanos.load(Ordering::Relaxed),
            })
        };
        serde_json::json!({
            "run": one(&self.run),
            "register_function": one(&self.register_function),
            "teardown": one(&self.teardown),
            "handler_call": one(&self.handler_call),
            "pool": one(&self.pool),
            "inventory": one(&self.inventory),
            "sweep": one(&self.sweep),
            "shutdown": one(&self.shutdown),
        })
    }
}
