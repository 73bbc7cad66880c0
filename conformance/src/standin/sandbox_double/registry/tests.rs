//! The registry's own checks: capacity, the exec cap, stop claims, the idle
//! clock and reaping bounds.

use super::*;
use crate::standin::sandbox_double::error::SCode;
use crate::standin::sandbox_double::image_layer::testing::TempLayer;
use crate::standin::sandbox_double::isolation::HostLayout;

/// One layer for every test here (none of them writes into it).
static TEST_LAYER: std::sync::OnceLock<TempLayer> = std::sync::OnceLock::new();

fn entry(idle_secs: u64) -> (Uuid, Entry) {
    let id = Uuid::new_v4();
    let layout = HostLayout::detect().expect("host layout");
    let layer = TEST_LAYER.get_or_init(TempLayer::new).0.clone();
    let scratch = Scratch::create(&layout, layer.clone(), id).expect("scratch");
    (
        id,
        Entry::new(
            Some("t".into()),
            "python".into(),
            idle_secs,
            Duration::ZERO,
            Arc::new(scratch),
            GuestVm::none(layer),
            vec![],
        ),
    )
}

fn cleanup(reg: &Registry) {
    for (_, e) in reg.lock().drain() {
        let _ = e.scratch.remove();
    }
}

fn code(r: Result<Guest, DaemonError>) -> Option<SCode> {
    r.err().map(|e| e.code())
}

#[test]
fn capacity_is_enforced_on_insert() {
    let reg = Registry::new(4);
    let (a, ea) = entry(300);
    let (b, eb) = entry(300);
    let b_scratch = eb.scratch.path().to_path_buf();
    assert!(reg.insert(a, ea, 1).is_ok());
    let err = reg
        .insert(b, eb, 1)
        .expect_err("second insert must fail at capacity 1");
    assert_eq!(err.code(), SCode::S400);
    assert_eq!(
        err.to_string(),
        "resource limit exceeded: max_concurrent_sandboxes (1) reached"
    );
    assert!(!b_scratch.exists(), "a refused sandbox leaves no scratch");
    cleanup(&reg);
}

#[test]
fn closing_claims_everything_and_refuses_new_sandboxes() {
    let reg = Registry::new(4);
    let (a, ea) = entry(300);
    let (b, eb) = entry(300);
    assert!(reg.insert(a, ea, 8).is_ok());
    assert!(reg.insert(b, eb, 8).is_ok());
    assert!(matches!(reg.begin_stop(a), Ok(StopClaim::Claimed(_))));
    let claimed = reg.close_and_claim_all();
    assert_eq!(
        claimed.len(),
        2,
        "a sandbox already stopping is claimed too"
    );
    let (c, ec) = entry(300);
    let c_scratch = ec.scratch.path().to_path_buf();
    let err = reg.insert(c, ec, 8).expect_err("closed");
    assert_eq!(err.code(), SCode::S300);
    assert!(!c_scratch.exists());
    for w in claimed {
        let _ = w.scratch.remove();
    }
}

#[test]
fn exec_cap_then_release() {
    let reg = Registry::new(2);
    let (id, e) = entry(300);
    assert!(reg.insert(id, e, 8).is_ok());
    assert!(reg.begin_exec(id).is_ok());
    assert!(reg.begin_exec(id).is_ok());
    assert_eq!(code(reg.begin_exec(id)), Some(SCode::S003));
    reg.end_exec(id);
    assert!(reg.begin_exec(id).is_ok());
    let s = &reg.summaries()[0];
    assert_eq!(
        (s.exec_in_flight, s.exec_slots_free, s.exec_in_progress),
        (2, 0, true)
    );
    cleanup(&reg);
}

#[test]
fn zero_cap_admits_one() {
    let reg = Registry::new(0);
    let (id, e) = entry(300);
    assert!(reg.insert(id, e, 8).is_ok());
    assert!(reg.begin_exec(id).is_ok());
    assert_eq!(code(reg.begin_exec(id)), Some(SCode::S003));
    cleanup(&reg);
}

#[test]
fn unknown_and_stopping_ids() {
    let reg = Registry::new(4);
    assert_eq!(code(reg.begin_exec(Uuid::new_v4())), Some(SCode::S002));
    assert_eq!(code(reg.touch(Uuid::new_v4())), Some(SCode::S002));
    let (id, e) = entry(300);
    assert!(reg.insert(id, e, 8).is_ok());
    // A stop ends the VM but marks it stopped only after its grace: calls
    // reach for the gone VM (S300, S216), a second stop pays a grace too.
    assert!(matches!(reg.begin_stop(id), Ok(StopClaim::Claimed(_))));
    assert_eq!(code(reg.begin_exec(id)), Some(SCode::S300));
    assert_eq!(code(reg.touch(id)), Some(SCode::S216));
    assert!(matches!(reg.begin_stop(id), Ok(StopClaim::VmEnded)));
    assert!(!reg.is_live(id));
    assert!(!reg.summaries()[0].stopped);
    // The reaper's claim marks it stopped at once: S004, and a stop then
    // answers at once.
    let (reaped, e) = entry(0);
    assert!(reg.insert(reaped, e, 8).is_ok());
    let later = Instant::now() + Duration::from_secs(1);
    assert!(reg.claim_for_reap(reaped, later, Duration::ZERO).is_some());
    assert_eq!(code(reg.begin_exec(reaped)), Some(SCode::S004));
    assert_eq!(code(reg.touch(reaped)), Some(SCode::S004));
    assert!(matches!(
        reg.begin_stop(reaped),
        Ok(StopClaim::AlreadyStopping)
    ));
    cleanup(&reg);
}

/// Reaping needs strictly more than the idle timeout; an exec in flight
/// protects the sandbox until the busy grace past it.
#[rstest::rstest]
#[case::idle(5, false, 5_000)]
#[case::exec_in_flight(1, true, 11_000)]
fn reaping_needs_strictly_more_than_its_bound(
    #[case] idle_secs: u64,
    #[case] exec_in_flight: bool,
    #[case] bound_ms: u64,
) {
    let reg = Registry::new(4);
    let (id, e) = entry(idle_secs);
    assert!(reg.insert(id, e, 8).is_ok());
    if exec_in_flight {
        assert!(reg.begin_exec(id).is_ok());
    }
    let t0 = reg.lock().get(&id).map(|e| e.last_activity).expect("entry");
    let grace = Duration::from_secs(10);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    assert!(reg.claim_for_reap(id, at(bound_ms), grace).is_none());
    assert!(reg.claim_for_reap(id, at(bound_ms + 1), grace).is_some());
    cleanup(&reg);
}

/// Returns once the monotonic clock reads later than `t`, so that a reset
/// of the idle clock shows as a later instant.
fn clock_passes(t: Instant) {
    let passed = crate::standin::wait::until_blocking(
        Duration::from_secs(1),
        Duration::from_micros(100),
        || Instant::now() > t,
    );
    assert!(passed, "the monotonic clock advances");
}

#[test]
fn touch_and_exec_end_reset_the_clock_but_list_does_not() {
    let reg = Registry::new(4);
    let (id, e) = entry(1);
    assert!(reg.insert(id, e, 8).is_ok());
    let last = |reg: &Registry| reg.lock().get(&id).map(|e| e.last_activity).expect("entry");
    let t0 = last(&reg);
    let _ = reg.summaries();
    assert_eq!(last(&reg), t0, "list must not reset the idle clock");
    clock_passes(t0);
    assert!(reg.touch(id).is_ok());
    let t1 = last(&reg);
    assert!(t1 > t0, "an fs op resets the idle clock");
    assert!(reg.begin_exec(id).is_ok());
    let t2 = last(&reg);
    assert!(t2 > t1, "exec start resets the idle clock");
    clock_passes(t2);
    reg.end_exec(id);
    assert!(last(&reg) > t2, "exec end resets the idle clock");
    cleanup(&reg);
}

#[tokio::test]
async fn finish_stop_removes_entry_and_scratch() {
    let reg = Registry::new(4);
    let (id, e) = entry(300);
    let path = e.scratch.path().to_path_buf();
    assert!(reg.insert(id, e, 8).is_ok());
    let Ok(StopClaim::Claimed(work)) = reg.begin_stop(id) else {
        panic!("claim");
    };
    let started = Instant::now();
    reg.finish_stop(work, Duration::from_millis(50)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "grace is paid"
    );
    assert!(!path.exists());
    assert_eq!(reg.count(), 0);
    assert_eq!(code(reg.begin_exec(id)), Some(SCode::S002));
}
