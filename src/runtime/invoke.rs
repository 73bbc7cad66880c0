//! One call of a published handler: a fresh interpreter in its namespace
//! runtime (pre-started when one waits), the answer read from the call's
//! own frame.

use super::errors::{DaemonFailure, HandlerCallError};
use super::failure::tail;
use super::ready::{self, Then};
use super::run::for_runtime;
use super::{teardown, Manager};
use crate::error::redact_uuids;
use crate::guest::{self, Frame, InvokeMode};
use crate::wire::HandlerPayload;
use serde_json::Value;

/// Where a call of a published handler comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOrigin {
    /// A caller on the bus: it queues for a slot in its turn.
    Caller,
    /// A handler of the same runtime (a self-call): it never queues, since
    /// the slot it would wait for may be held by the call waiting on it.
    Nested,
}

/// One call of a published handler: a fresh interpreter in its runtime.
pub(super) async fn call(
    m: &Manager,
    function_id: &str,
    payload: HandlerPayload,
    caller: &str,
    how: CallOrigin,
) -> Result<Value, HandlerCallError> {
    let (rt, path) = m
        .book
        .lock()
        .serving(function_id)
        .ok_or(HandlerCallError::RuntimeGone)?;
    let budget = m.config.clamp_timeout(None);
    let secret = guest::new_secret();
    let slot = match &how {
        CallOrigin::Caller => rt.slots.acquire(caller).await,
        CallOrigin::Nested => rt
            .slots
            .try_acquire()
            .ok_or(HandlerCallError::SelfCallCapacity {
                slots: rt.slots.size(),
            })?,
    };
    let timed = super::meta::Timed::start(&rt.meta);
    let p = guest::invoke_exec(
        rt.lang(),
        function_id,
        &path,
        InvokeMode::Call,
        payload.value(),
        &secret,
        budget,
    );
    let slots = rt.slots.size();
    let out = ready::exec_call(
        m.config.prestart_mode(),
        &rt.vm,
        for_runtime(m, &rt, p),
        Then::ServesAgain,
        slots,
    )
    .await;
    drop(timed);
    drop(slot);
    let out = match out {
        Ok(o) => o,
        Err(e) if e.is_gone() => {
            teardown::expire(m, &rt);
            return Err(HandlerCallError::Expired);
        }
        Err(e) => return Err(HandlerCallError::Exec(DaemonFailure::new(e, budget))),
    };
    let frame = guest::parse_frame(&out.stdout, &secret);
    if !out.stderr.is_empty() {
        tracing::debug!(function_id, output = %redact_uuids(&tail(&out.stderr, 4000)), "handler output");
    }
    match frame {
        Frame::Ok(v) => Ok(v),
        Frame::Err { kind, message } => Err(HandlerCallError::Handler { kind, message }),
        Frame::Missing => Err(HandlerCallError::NoResult {
            exit_code: out.exit_code,
            stderr: out.stderr,
        }),
    }
}
