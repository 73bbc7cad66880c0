//! The VM table's moves, one state at a time.

use super::*;

fn id(s: &str) -> SandboxId {
    SandboxId::new(s)
}

#[test]
fn a_vm_is_in_one_state_through_every_move() {
    let t = VmTable::new(1);
    assert_eq!(t.reserve(Lang::Python), 1);
    assert_eq!(
        t.pool_counts(Lang::Python),
        (0, 1),
        "booting counts as warming"
    );
    t.booted(&id("vm-1"), Lang::Python);
    assert_eq!(t.state(&id("vm-1")), Some(VmState::Warming));
    assert_eq!(
        t.pool_counts(Lang::Python),
        (0, 1),
        "still warming, now by id"
    );
    t.pool(&id("vm-1"));
    assert_eq!(t.pool_counts(Lang::Python), (1, 0));
    assert_eq!(t.reserve(Lang::Python), 0, "the pool is full");
    assert_eq!(
        t.take_pooled(Lang::Node, false),
        None,
        "languages never mix"
    );
    let (taken, _) = t.take_pooled(Lang::Python, true).unwrap();
    assert_eq!(t.state(&taken), Some(VmState::Leased));
    assert_eq!(t.pool_counts(Lang::Python), (0, 0));
    assert!(t.set_state(&taken, VmState::Runtime));
    assert!(t.set_state(&taken, VmState::Stopping));
    assert_eq!(t.stopping(), 1);
    t.remove(&taken);
    assert_eq!(t.state(&taken), None);
    assert!(!t.set_state(&taken, VmState::Runtime), "gone stays gone");
}

#[test]
fn the_pool_prefers_the_wanted_sdk_state_then_the_oldest() {
    let t = VmTable::new(3);
    t.reserve(Lang::Python);
    for n in ["a", "b", "c"] {
        t.booted(&id(n), Lang::Python);
        t.pool(&id(n));
    }
    t.sdk_prepared(&id("b"));
    assert_eq!(t.pooled_with_sdk(Lang::Python), 1);
    assert_eq!(t.take_pooled(Lang::Python, true), Some((id("b"), true)));
    assert_eq!(t.take_pooled(Lang::Python, true), Some((id("a"), false)));
    assert_eq!(t.take_pooled(Lang::Python, false), Some((id("c"), false)));
}

#[test]
fn a_stopping_vm_keeps_no_interpreter_waiting() {
    let t = VmTable::new(0);
    t.insert(&id("vm"), Lang::Node, VmState::Leased);
    let g = t.next_generation();
    t.put_waiting(&id("vm"), g);
    assert_eq!(t.waiting_count(), 1);
    t.sdk_prepared(&id("vm"));
    assert_eq!(
        t.take_waiting(&id("vm")),
        Some(Waiting {
            generation: g,
            stale: true
        })
    );
    t.returned(&id("vm"));
    t.put_waiting(&id("vm"), g);
    t.set_state(&id("vm"), VmState::Stopping);
    assert_eq!(t.waiting_count(), 0);
    t.put_waiting(&id("vm"), g + 1);
    assert_eq!(t.waiting_count(), 0, "a late put cannot revive it");
}

#[test]
fn interpreters_start_alone_or_beside_the_busy_ones_up_to_the_slots() {
    let t = VmTable::new(0);
    t.insert(&id("vm"), Lang::Python, VmState::Runtime);
    assert_eq!(
        t.start_plan(&id("vm"), 3, true),
        Some(Start::Alone),
        "none at all"
    );
    let g = t.next_generation();
    t.put_waiting(&id("vm"), g);
    assert!(t.take_waiting(&id("vm")).is_some());
    assert_eq!(
        t.start_plan(&id("vm"), 1, true),
        None,
        "one slot: never beside the lent one"
    );
    assert_eq!(
        t.start_plan(&id("vm"), 3, false),
        None,
        "never alone while one is out: that spawn would end it"
    );
    assert_eq!(t.start_plan(&id("vm"), 3, true), Some(Start::Beside));
    assert_eq!(t.start_plan(&id("vm"), 3, true), Some(Start::Beside));
    assert_eq!(
        t.start_plan(&id("vm"), 3, true),
        None,
        "one lent and two starting fill three slots"
    );
    t.started(&id("vm"), Some(t.next_generation()));
    t.started(&id("vm"), None);
    assert_eq!(t.waiting_count(), 1);
    t.returned(&id("vm"));
    assert!(t.take_waiting(&id("vm")).is_some());
    assert_eq!(t.take_waiting(&id("vm")), None, "the next call runs cold");
}

#[test]
fn a_closed_pool_reserves_nothing_and_counts_what_still_boots() {
    let t = VmTable::new(2);
    assert_eq!(t.reserve(Lang::Node), 2);
    t.close_pool();
    assert_eq!(t.reserve(Lang::Python), 0);
    assert_eq!(t.warming_total(), 2, "creates under way are not forgotten");
    t.boot_failed(Lang::Node);
    t.booted(&id("late"), Lang::Node);
    assert_eq!(t.warming_total(), 1);
    t.pool(&id("late"));
    assert_eq!(t.warming_total(), 0);
    assert_eq!(t.ids(), vec![id("late")], "it is in the table for shutdown");
}

#[test]
fn a_sandbox_id_never_shows_in_debug_output() {
    assert_eq!(format!("{:?}", id("secret-vm")), "SandboxId(..)");
}

/// Node's interpreters are counted in the guest: calls at once all relay
/// to the latest fill's generation, which none of them takes, and each
/// fill replaces the one before it. Python's servers are taken one each.
#[test]
fn node_calls_share_the_latest_fill_and_python_calls_take_a_server_each() {
    let t = VmTable::new(0);
    for (n, lang) in [("node", Lang::Node), ("py", Lang::Python)] {
        t.reserve(lang);
        t.booted(&id(n), lang);
        t.put_waiting(&id(n), 1);
        t.put_waiting(&id(n), 2);
    }
    let latest = Some(Waiting {
        generation: 2,
        stale: false,
    });
    assert_eq!(t.peek_waiting(&id("node")), latest);
    assert_eq!(t.peek_waiting(&id("node")), latest, "left waiting");
    assert_eq!(t.take_waiting(&id("node")), latest);
    assert_eq!(t.take_waiting(&id("node")), None, "one fill names them all");
    assert_eq!(t.take_waiting(&id("py")), latest);
    assert_eq!(t.take_waiting(&id("py")).map(|w| w.generation), Some(1));
    assert_eq!(t.take_waiting(&id("py")), None);
}
