//! The lifecycle events: what subscribers hear of runtimes (created,
//! function registered or unregistered, torn down, expired) and of the
//! orphan sweep, each carrying the runtime's inventory entry.

use super::inventory::{self, Liveness};
use super::records::Runtime;
use super::Manager;
use crate::events::{now_ms, Event, EventKind};

/// Sends `kind` about `rt` to the lifecycle subscribers.
pub(super) fn runtime(m: &Manager, kind: EventKind, rt: &Runtime, function_id: Option<&str>) {
    if m.events.subscriber_count() == 0 {
        return;
    }
    let entry = serde_json::to_value(inventory::entry(m, rt, Liveness::Unknown)).ok();
    m.events.emit(Event {
        event: kind,
        at_ms: now_ms(),
        runtime: entry,
        function_id: function_id.map(str::to_string),
        swept: None,
        owner: rt.owner.clone(),
    });
}

/// A runtime left the worker: its functions' unregistrations, then `kind`.
pub(super) fn ended(m: &Manager, kind: EventKind, rt: &Runtime, unregistered: &[String]) {
    for f in unregistered {
        runtime(m, EventKind::FunctionUnregistered, rt, Some(f));
    }
    runtime(m, kind, rt, None);
}

pub(super) fn swept(m: &Manager, swept: usize) {
    m.events.emit(Event {
        event: EventKind::OrphansSwept,
        at_ms: now_ms(),
        runtime: None,
        function_id: None,
        swept: Some(swept),
        owner: None,
    });
}
