//! The inventory over in-memory fakes: liveness when `sandbox::list` fails,
//! handles stable across calls and unrelated to ids, executions counted,
//! and at most one `sandbox::list` per call.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_code_runner::bus::{Bus, BusError, FunctionSpec, Handler, TriggerBinding};
use sandbox_code_runner::config::Config;
use sandbox_code_runner::ids::{Lang, RuntimeId};
use sandbox_code_runner::runtime::{Liveness, Manager, VmNaming};
use sandbox_code_runner::sandbox::{
    CreateParams, ExecOutput, ExecParams, ListedSandbox, SandboxApi, SandboxError,
};
use serde_json::Value;

#[derive(Default)]
struct MemSandbox {
    next: AtomicU64,
    live: Mutex<HashMap<String, String>>,
    lists: AtomicU64,
    list_fails: AtomicBool,
}

#[async_trait::async_trait]
impl SandboxApi for MemSandbox {
    async fn create(&self, p: CreateParams) -> Result<String, SandboxError> {
        let id = format!("sb-{}", self.next.fetch_add(1, Ordering::Relaxed));
        self.live.lock().unwrap().insert(id.clone(), p.name);
        Ok(id)
    }
    async fn exec(&self, id: &str, _p: ExecParams) -> Result<ExecOutput, SandboxError> {
        if !self.live.lock().unwrap().contains_key(id) {
            return Err(SandboxError::Daemon {
                code: "S002".into(),
                message: "gone".into(),
                retryable: false,
            });
        }
        Ok(ExecOutput {
            stdout: "1\n".into(),
            stderr: String::new(),
            exit_code: Some(0),
            duration_ms: 1,
        })
    }
    async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        self.live.lock().unwrap().remove(id);
        Ok(())
    }
    async fn list(&self) -> Result<Vec<ListedSandbox>, SandboxError> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        if self.list_fails.load(Ordering::Relaxed) {
            return Err(SandboxError::Daemon {
                code: "S100".into(),
                message: "daemon busy".into(),
                retryable: false,
            });
        }
        Ok(self
            .live
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| ListedSandbox {
                sandbox_id: k.clone(),
                name: Some(v.clone()),
            })
            .collect())
    }
    async fn write_file(&self, _: &str, _: &str, _: &str) -> Result<(), SandboxError> {
        Ok(())
    }
}

#[derive(Default)]
struct NoBus;

impl Bus for NoBus {
    fn call<'a>(
        &'a self,
        _function_id: &'a str,
        _payload: Value,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + 'a>> {
        Box::pin(async { Err(BusError::new("NOT_FOUND", "no bus")) })
    }
    fn publish(&self, _spec: FunctionSpec, _handler: Handler) {}
    fn unpublish(&self, _function_id: &str) {}
    fn bind(&self, t: &str, f: &str, _c: Value) -> Result<TriggerBinding, BusError> {
        Ok(TriggerBinding::detached(t, f))
    }
    fn unbind(&self, _b: TriggerBinding) {}
}

fn world() -> (Arc<MemSandbox>, Arc<Manager>) {
    let sandbox = Arc::new(MemSandbox::default());
    let manager = Manager::new(
        sandbox.clone(),
        Arc::new(NoBus),
        Config {
            warm_pool: 0,
            idle_ttl_secs: 60,
            ..Config::default()
        },
        VmNaming::new("test"),
        "ws://127.0.0.1:1".into(),
    );
    (sandbox, manager)
}

async fn keep(m: &Manager) -> RuntimeId {
    let out = m
        .run_fresh(Lang::Python, "print(1)", true, 5_000)
        .await
        .unwrap();
    RuntimeId::from_caller(out.runtime_id.as_deref().unwrap())
}

#[tokio::test]
async fn a_failed_list_makes_liveness_unknown_and_says_why() {
    let (sandbox, m) = world();
    keep(&m).await;
    sandbox.list_fails.store(true, Ordering::Relaxed);
    let inv = m.inventory().await;
    assert_eq!(inv.runtimes[0].vm, Liveness::Unknown);
    assert!(inv.vm_check.contains("S100"), "{}", inv.vm_check);
    sandbox.list_fails.store(false, Ordering::Relaxed);
    assert_eq!(m.inventory().await.runtimes[0].vm, Liveness::Alive);
}

#[tokio::test]
async fn one_sandbox_list_per_call_whatever_the_count() {
    let (sandbox, m) = world();
    for _ in 0..25 {
        keep(&m).await;
    }
    let before = sandbox.lists.load(Ordering::Relaxed);
    let inv = m.inventory().await;
    assert_eq!(inv.runtimes.len(), 25);
    assert_eq!(sandbox.lists.load(Ordering::Relaxed) - before, 1);
}

#[tokio::test]
async fn handles_are_stable_distinct_and_unrelated_to_ids() {
    let (sandbox, m) = world();
    let a = keep(&m).await;
    let b = keep(&m).await;
    let first = m.inventory().await;
    let second = m.inventory().await;
    let handles: Vec<&str> = first.runtimes.iter().map(|r| r.handle.as_str()).collect();
    let again: Vec<&str> = second.runtimes.iter().map(|r| r.handle.as_str()).collect();
    assert_eq!(handles, again, "a handle follows its runtime across calls");
    assert_ne!(handles[0], handles[1]);
    let text = serde_json::to_string(&first).unwrap();
    for id in [a.expose(), b.expose()] {
        assert!(!text.contains(id));
        assert!(!text.contains(&id[3..11]), "no fragment of the id either");
    }
    for sb in sandbox.live.lock().unwrap().keys() {
        assert!(!text.contains(sb.as_str()));
    }
}

#[tokio::test]
async fn executions_and_last_use_are_counted_and_gone_vms_show() {
    let (sandbox, m) = world();
    let id = keep(&m).await;
    m.run_in(&id, None, "print(2)", 5_000).await.unwrap();
    m.run_in(&id, None, "print(3)", 5_000).await.unwrap();
    let inv = m.inventory().await;
    let r = &inv.runtimes[0];
    assert_eq!(r.executions, 3, "the creating run and two reuses");
    assert_eq!(r.kind, "kept");
    assert_eq!(r.idle_ttl_secs, 60);
    assert_eq!(r.reap_at_ms, r.last_used_at_ms + 60_000);
    assert!(r.last_used_at_ms >= r.created_at_ms);
    sandbox.live.lock().unwrap().clear();
    assert_eq!(m.inventory().await.runtimes[0].vm, Liveness::Gone);
}
