//! One error type per operation of the manager (run, register, teardown,
//! handler call), in the style of Cloud Hypervisor and Firecracker: each
//! variant names where the operation failed and keeps its cause as a
//! `#[source]`. The wire sees none of them: each maps onto the one table of
//! wire codes ([`WorkerError`]) at the edge, with the daemon's S-code kept
//! and sandbox ids scrubbed (`failure::infra_error`). No variant holds a
//! runtime id or a guest token, so none can print one.

use super::failure::{infra_error, tail, EXPIRED_FUNCTION, EXPIRED_RUN};
use crate::bus::BusError;
use crate::error::WorkerError;
use crate::guest::FrameError;
use crate::ids::Lang;
use crate::sandbox::SandboxError;
use crate::tenancy::TenantRefusal;

/// A daemon call that failed for an operation whose budget was `budget_ms`.
#[derive(Debug, thiserror::Error)]
#[error("iii-sandbox failed (budget {budget_ms} ms)")]
pub struct DaemonFailure {
    #[source]
    pub cause: SandboxError,
    pub budget_ms: u64,
}

impl DaemonFailure {
    pub(super) fn new(cause: SandboxError, budget_ms: u64) -> DaemonFailure {
        DaemonFailure { cause, budget_ms }
    }

    fn into_wire(self) -> WorkerError {
        infra_error(self.cause, self.budget_ms)
    }
}

/// Why a `run` failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the guest's tenant may not start another VM")]
    Tenant(#[source] TenantRefusal),
    #[error("no VM could be had for the run")]
    AcquireVm(#[source] DaemonFailure),
    #[error("preparing the guest SDK in the run's VM")]
    PrepareSdk(#[source] DaemonFailure),
    #[error("executing the code")]
    Exec(#[source] DaemonFailure),
    #[error("no runtime has this runtime_id")]
    UnknownRuntime,
    #[error("the runtime runs {runs}, the request names another language")]
    LangMismatch { runs: Lang },
    #[error("the kept runtime's VM was reaped")]
    Expired,
    #[error("the trusted run this guest code grew from has ended")]
    LineageEnded,
    #[error("the run timed out, and the session's interpreter with it")]
    SessionTimedOut(#[source] DaemonFailure),
    #[error("the session's interpreter did not take the run")]
    SessionLost { boot: String },
    #[error("the runtime was kept with session {kept}, the request says {asked}")]
    SessionMismatch { kept: bool, asked: bool },
}

impl RunError {
    fn daemon_cause(&self) -> Option<&crate::sandbox::SandboxError> {
        match self {
            RunError::AcquireVm(d)
            | RunError::PrepareSdk(d)
            | RunError::Exec(d)
            | RunError::SessionTimedOut(d) => Some(&d.cause),
            _ => None,
        }
    }

    /// The daemon no longer has the VM (it was reaped).
    pub(super) fn vm_gone(&self) -> bool {
        self.daemon_cause().is_some_and(|c| c.is_gone())
    }

    /// The daemon refused an exec: the sandbox had its most in flight.
    pub(super) fn exec_cap(&self) -> bool {
        self.daemon_cause().is_some_and(|c| c.is_exec_cap())
    }
}

impl From<RunError> for WorkerError {
    fn from(e: RunError) -> WorkerError {
        match e {
            RunError::Tenant(r) => r.into(),
            RunError::LineageEnded => WorkerError::Expired(
                "the trusted run or runtime this guest code grew from has ended; \
                 its kept runtimes end with it"
                    .into(),
            ),
            RunError::AcquireVm(d) | RunError::PrepareSdk(d) | RunError::Exec(d) => d.into_wire(),
            RunError::UnknownRuntime => WorkerError::RuntimeNotFound("unknown runtime_id".into()),
            RunError::LangMismatch { runs } => WorkerError::invalid(
                "lang",
                format!("this runtime runs {runs}; omit `lang` or pass \"{runs}\""),
            ),
            RunError::Expired => WorkerError::Expired(EXPIRED_RUN.into()),
            RunError::SessionTimedOut(d) => match d.into_wire() {
                WorkerError::Timeout(m) => WorkerError::Timeout(format!(
                    "{m}; the session's interpreter went with the run: the next run into this \
                     runtime starts a fresh one on the same files (its answer says \
                     `session: \"reset\"`)"
                )),
                other => other,
            },
            RunError::SessionLost { boot } => WorkerError::Engine(if boot.is_empty() {
                "the session's interpreter did not start".to_string()
            } else {
                format!(
                    "the session's interpreter did not start: {}",
                    tail(&boot, 2000)
                )
            }),
            RunError::SessionMismatch { kept, .. } => WorkerError::invalid(
                "session",
                format!(
                    "this runtime was kept {}; omit `session` or pass {kept}",
                    if kept {
                        "with a session"
                    } else {
                        "without a session"
                    }
                ),
            ),
        }
    }
}

/// Why a `register_function` failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("this worker already serves or is registering the id")]
    IdTaken,
    #[error("another worker on the bus serves the id")]
    IdOnTheBus,
    #[error("asking the engine whether the id is free")]
    IdCheck(#[source] BusError),
    #[error("namespace `{namespace}` is another tenant's")]
    ForeignNamespace { namespace: String },
    #[error("namespace `{namespace}` belongs to guest code")]
    GuestNamespace { namespace: String },
    #[error("the guest's tenant may not start another VM")]
    Tenant(#[source] TenantRefusal),
    #[error("no VM could be had for the namespace")]
    AcquireVm(#[source] DaemonFailure),
    #[error("installing the handler in the namespace's VM")]
    Install(#[source] DaemonFailure),
    #[error("the namespace runtime already holds {limit} functions")]
    TooManyFunctions { limit: usize },
    #[error("the handler was refused when checked: {why}")]
    BadHandler { why: String },
    #[error("the namespace runtime's VM was reaped")]
    Expired,
}

impl From<RegisterError> for WorkerError {
    fn from(e: RegisterError) -> WorkerError {
        match e {
            RegisterError::IdTaken => WorkerError::invalid("function_id", "is already registered"),
            RegisterError::IdOnTheBus => {
                WorkerError::invalid("function_id", "is already registered on the bus")
            }
            RegisterError::IdCheck(b) => WorkerError::Engine(format!(
                "cannot check whether the id is free: {}: {}",
                b.code, b.message
            )),
            RegisterError::ForeignNamespace { namespace } => WorkerError::invalid(
                "function_id",
                format!(
                    "namespace `{namespace}` belongs to another tenant; register in a namespace of your own"
                ),
            ),
            RegisterError::GuestNamespace { namespace } => WorkerError::invalid(
                "function_id",
                format!(
                    "namespace `{namespace}` belongs to guest code (a tenant's run created it); \
                     tear it down to take it back, or register in another namespace"
                ),
            ),
            RegisterError::Tenant(r) => r.into(),
            RegisterError::AcquireVm(d) | RegisterError::Install(d) => d.into_wire(),
            RegisterError::TooManyFunctions { limit } => WorkerError::invalid(
                "function_id",
                format!("namespace runtime already holds {limit} functions"),
            ),
            RegisterError::BadHandler { why } => WorkerError::invalid("source", why),
            RegisterError::Expired => WorkerError::Expired(EXPIRED_FUNCTION.into()),
        }
    }
}

/// Why a `teardown` failed.
#[derive(Debug, thiserror::Error)]
pub enum TeardownError {
    #[error("no runtime has this runtime_id")]
    UnknownRuntime,
    #[error("no live runtime backs namespace {namespace}")]
    NoRuntime { namespace: String },
    #[error("namespace `{namespace}` is not the guest tenant's")]
    NotOwned { namespace: String },
}

impl From<TeardownError> for WorkerError {
    fn from(e: TeardownError) -> WorkerError {
        match e {
            TeardownError::UnknownRuntime => {
                WorkerError::RuntimeNotFound("unknown runtime_id".into())
            }
            TeardownError::NoRuntime { namespace } => {
                WorkerError::RuntimeNotFound(format!("no live runtime backs namespace {namespace}"))
            }
            TeardownError::NotOwned { namespace } => WorkerError::invalid(
                "namespace",
                format!("`{namespace}` is not a namespace this tenant registered"),
            ),
        }
    }
}

/// Why one call of a published handler failed.
#[derive(Debug, thiserror::Error)]
pub enum HandlerCallError {
    #[error("the function's runtime is gone")]
    RuntimeGone,
    #[error("the namespace runtime's VM was reaped")]
    Expired,
    #[error("executing the handler")]
    Exec(#[source] DaemonFailure),
    #[error("the handler failed ({kind:?})")]
    Handler { kind: FrameError, message: String },
    #[error("the handler's process ended without a result (exit {exit_code:?})")]
    NoResult {
        exit_code: Option<i32>,
        stderr: String,
    },
    /// A handler called its own runtime while every slot was held.
    #[error("a self-call found all {slots} slots of its runtime held")]
    SelfCallCapacity { slots: usize },
}

impl From<HandlerCallError> for WorkerError {
    fn from(e: HandlerCallError) -> WorkerError {
        match e {
            HandlerCallError::RuntimeGone => {
                WorkerError::RuntimeNotFound("the function's runtime is gone".into())
            }
            HandlerCallError::Expired => WorkerError::Expired(EXPIRED_FUNCTION.into()),
            HandlerCallError::Exec(d) => d.into_wire(),
            HandlerCallError::Handler { kind, message } => WorkerError::HandlerError(match kind {
                FrameError::NotJson => {
                    format!("handler returned a value JSON cannot represent: {message}")
                }
                FrameError::Throw
                | FrameError::NoHandler
                | FrameError::AsyncHandler
                | FrameError::LoadError => format!("handler raised: {}", tail(&message, 2000)),
            }),
            HandlerCallError::NoResult { exit_code, stderr } => WorkerError::HandlerError(format!(
                "handler process ended (exit {exit_code:?}) without a result: {}",
                tail(&stderr, 2000)
            )),
            HandlerCallError::SelfCallCapacity { slots } => WorkerError::Capacity(format!(
                "a handler called its own runtime while all {slots} of its calls \
                 (handler_concurrency) were running; it would wait on itself"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use std::error::Error as _;

    #[test]
    fn each_failure_keeps_its_cause_and_maps_to_one_wire_code() {
        // (S-code mappings are `manager::daemon_failures_map_to_worker_codes`.)
        let bus = SandboxError::Bus(BusError::new(
            "TIMEOUT",
            "sandbox 123e4567-e89b-42d3-a456-426614174000 did not answer",
        ));
        let exec = RunError::Exec(DaemonFailure::new(bus, 5000));
        let cause = exec
            .source()
            .and_then(|d| d.source())
            .expect("the daemon's error");
        assert!(cause.to_string().contains("TIMEOUT"), "{cause}");
        let wire = WorkerError::from(exec);
        assert_eq!(wire.code(), ErrorCode::Engine);
        assert!(wire.to_string().contains("TIMEOUT"), "{wire}");
        assert!(
            !wire.to_string().contains("123e4567"),
            "sandbox ids are scrubbed"
        );

        let check = RegisterError::IdCheck(BusError::new("TIMEOUT", "slow"));
        assert_eq!(check.source().unwrap().to_string(), "TIMEOUT: slow");
        assert_eq!(WorkerError::from(check).code(), ErrorCode::Engine);

        let tenant = RunError::Tenant(TenantRefusal::Depth { limit: 4 });
        assert!(tenant.source().is_some());
        assert_eq!(WorkerError::from(tenant).code(), ErrorCode::Capacity);
    }

    #[test]
    fn the_wire_messages_are_the_contracts() {
        let m = |e: WorkerError| e.to_string();
        assert_eq!(m(RunError::UnknownRuntime.into()), "unknown runtime_id");
        assert_eq!(
            m(RunError::LangMismatch { runs: Lang::Python }.into()),
            "`lang`: this runtime runs python; omit `lang` or pass \"python\""
        );
        assert_eq!(
            m(TeardownError::NotOwned {
                namespace: "ops".into()
            }
            .into()),
            "`namespace`: `ops` is not a namespace this tenant registered"
        );
        assert_eq!(
            WorkerError::from(HandlerCallError::Expired).code(),
            ErrorCode::Expired
        );
    }
}
