//! The inventory over in-memory fakes: liveness when `sandbox::list` fails,
//! handles stable across calls and unrelated to ids, executions counted,
//! and at most one `sandbox::list` per call.

mod fakes;

use std::sync::Arc;

use fakes::{daemon, FakeBus, FakeSandbox};
use sandbox_code_runner::config::Config;
use sandbox_code_runner::ids::{Lang, RuntimeId};
use sandbox_code_runner::runtime::{Liveness, Manager, VmNaming};

fn world() -> (Arc<FakeSandbox>, Arc<Manager>) {
    let sandbox = FakeSandbox::new();
    let manager = Manager::new(
        sandbox.clone(),
        Arc::new(FakeBus::default()),
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

/// How many `sandbox::list` calls the fake has answered.
fn lists(sandbox: &FakeSandbox) -> usize {
    sandbox.ops().iter().filter(|op| *op == "list").count()
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
    *sandbox.list_error.lock().unwrap() = Some(daemon("S100", "daemon busy"));
    let inv = m.inventory().await;
    assert_eq!(inv.runtimes[0].vm, Liveness::Unknown);
    assert!(inv.vm_check.contains("S100"), "{}", inv.vm_check);
    *sandbox.list_error.lock().unwrap() = None;
    assert_eq!(m.inventory().await.runtimes[0].vm, Liveness::Alive);
}

#[tokio::test]
async fn one_sandbox_list_per_call_whatever_the_count() {
    let (sandbox, m) = world();
    for _ in 0..25 {
        keep(&m).await;
    }
    let before = lists(&sandbox);
    let inv = m.inventory().await;
    assert_eq!(inv.runtimes.len(), 25);
    assert_eq!(lists(&sandbox) - before, 1);
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
    m.run_in(&id, None, None, "print(2)", 5_000, None)
        .await
        .unwrap();
    m.run_in(&id, None, None, "print(3)", 5_000, None)
        .await
        .unwrap();
    let inv = m.inventory().await;
    let r = &inv.runtimes[0];
    assert_eq!(r.executions, 3, "the creating run and two reuses");
    assert_eq!(r.kind, sandbox_code_runner::runtime::RuntimeKind::Kept);
    assert_eq!(r.idle_ttl_secs, 60);
    assert_eq!(r.reap_at_ms, r.last_used_at_ms + 60_000);
    assert!(r.last_used_at_ms >= r.created_at_ms);
    sandbox.reap_all();
    assert_eq!(m.inventory().await.runtimes[0].vm, Liveness::Gone);
}
