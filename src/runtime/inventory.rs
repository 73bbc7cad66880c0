//! The runtime inventory (`list_runtimes`): what an operator may see of a
//! runtime without holding its capability (the lifecycle events show the
//! same entry: `lifecycle`).
//!
//! Every record gets a random handle (`h-` + 16 hex digits) when it is
//! created. The handle is drawn independently of the runtime id and of the
//! sandbox id, so nothing about either can be recovered from it; it only
//! lets an operator follow one runtime across refreshes and events.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use serde::Serialize;
use serde_json::Value;

use super::records::Runtime;
use super::Manager;
use crate::events::now_ms;
use crate::ids::Lang;

/// Whether a runtime's VM is still there, by the daemon's `sandbox::list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    Alive,
    Gone,
    /// The list call failed, or was not made (events).
    Unknown,
}

/// What kind of runtime an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    /// A `run` with keep: true.
    Kept,
    /// A `register_function` namespace's.
    Namespace,
}

/// One inventory entry. No runtime id, no sandbox id.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RuntimeEntry {
    /// Random per record; the runtime id cannot be derived from it.
    pub handle: String,
    /// `kept` (a `run` with keep: true) or `namespace` (register_function).
    pub kind: RuntimeKind,
    pub lang: Lang,
    /// Namespace runtimes only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Function ids the runtime serves (namespace runtimes), sorted.
    pub functions: Vec<String>,
    pub created_at_ms: u64,
    pub last_used_at_ms: u64,
    pub idle_ttl_secs: u64,
    /// When the daemon reaps the VM if nothing uses it before.
    pub reap_at_ms: u64,
    pub executions: u64,
    pub exec_ms: f64,
    pub vm: Liveness,
}

/// Warm VMs of one language.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PoolEntry {
    pub ready: usize,
    pub warming: usize,
    pub target: usize,
}

/// What `list_runtimes` answers.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Inventory {
    pub generated_at_ms: u64,
    /// Sorted by namespace (kept runtimes last), then creation.
    pub runtimes: Vec<RuntimeEntry>,
    /// `ok`, or why VM liveness is `unknown` (the `sandbox::list` failure).
    pub vm_check: String,
    pub pool: std::collections::BTreeMap<String, PoolEntry>,
    /// Per-operation totals since the process started (`stats`).
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub totals: Value,
}

pub(super) fn entry(m: &Manager, rt: &Runtime, vm: Liveness) -> RuntimeEntry {
    let ttl = m.config.idle_ttl_secs;
    let functions = m.book.lock().functions_of(rt);
    let m = &rt.meta;
    let last = m.last_used_ms.load(Ordering::Relaxed);
    RuntimeEntry {
        handle: m.handle.clone(),
        kind: if rt.namespace.is_some() {
            RuntimeKind::Namespace
        } else {
            RuntimeKind::Kept
        },
        lang: rt.lang(),
        namespace: rt.namespace.as_ref().map(|n| n.canonical()),
        functions,
        created_at_ms: m.created_ms,
        last_used_at_ms: last,
        idle_ttl_secs: ttl,
        reap_at_ms: last.saturating_add(ttl.saturating_mul(1000)),
        executions: m.executions.load(Ordering::Relaxed),
        exec_ms: (m.exec_us.load(Ordering::Relaxed) as f64 / 10.0).round() / 100.0,
        vm,
    }
}

/// The inventory: one `sandbox::list` at most, nothing else on the daemon.
pub(super) async fn list(m: &Manager) -> Inventory {
    let listed = m.vms.list().await;
    let (alive, vm_check): (Option<HashSet<String>>, String) = match listed {
        Ok(l) => (
            Some(l.into_iter().map(|s| s.sandbox_id).collect()),
            "ok".into(),
        ),
        Err(e) if e.is_not_installed() => (None, "iii-sandbox is not connected".into()),
        Err(e) => (
            None,
            format!(
                "sandbox::list failed: {}",
                crate::error::redact_uuids(&e.to_string())
            ),
        ),
    };
    let rts: Vec<std::sync::Arc<Runtime>> = m.book.lock().runtimes();
    let mut runtimes: Vec<RuntimeEntry> = rts
        .iter()
        .map(|rt| {
            let vm = match &alive {
                None => Liveness::Unknown,
                Some(set) if set.contains(rt.vm.sandbox_id().as_str()) => Liveness::Alive,
                Some(_) => Liveness::Gone,
            };
            entry(m, rt, vm)
        })
        .collect();
    runtimes.sort_by(|a, b| {
        (
            a.namespace.is_none(),
            &a.namespace,
            a.created_at_ms,
            &a.handle,
        )
            .cmp(&(
                b.namespace.is_none(),
                &b.namespace,
                b.created_at_ms,
                &b.handle,
            ))
    });
    let pool = [Lang::Node, Lang::Python]
        .into_iter()
        .map(|l| {
            (l.as_str().to_string(), {
                let (ready, warming) = m.vms.table().pool_counts(l);
                PoolEntry {
                    ready,
                    warming,
                    target: m.config.warm_pool,
                }
            })
        })
        .collect();
    Inventory {
        generated_at_ms: now_ms(),
        runtimes,
        vm_check,
        pool,
        totals: m.stats.to_json(),
    }
}
