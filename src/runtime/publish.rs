//! The `register_function` operation: checking the id is free (here and on
//! the bus), the namespace runtime, loading the handler in it, and
//! publishing it on the bus.

use std::sync::{Arc, Weak};

use serde_json::Value;

use super::errors::{DaemonFailure, RegisterError};
use super::failure::tail;
use super::lifecycle;
use super::ready::{self, Then};
use super::records::{Records, Runtime};
use super::run::for_runtime;
use super::{acquire, teardown, Manager, MAX_FUNCTIONS_PER_RUNTIME};
use crate::bus::FunctionSpec;
use crate::events::EventKind;
use crate::guest::{self, Frame, FrameError, InvokeMode};
use crate::guest_access::GuestTokens;
use crate::guest_policy::NamespaceOwner;
use crate::ids::{FunctionId, Lang, Namespace, RuntimeId};
use crate::sandbox::SandboxError;
use crate::tenancy::Caller;
use crate::wire::Shown;

/// Registrations queue for a namespace runtime's slots as one caller.
const REGISTRATIONS: &str = "registrations";

/// Why installing a handler did not finish.
enum InstallError {
    /// The namespace VM was reaped.
    Gone,
    Failed(RegisterError),
}

/// `Err` naming `ns` when it is not `caller`'s to register into: a guest
/// only into a namespace its lineage owns (or a free one); a trusted caller
/// never into one guest code owns, by a runtime or by registering there on
/// its own connection (it may tear it down first to take it back).
fn owned_by_another(
    st: &Records,
    tokens: &GuestTokens,
    caller: &Caller,
    ns: &Namespace,
) -> Result<(), RegisterError> {
    let namespace = || ns.as_str().to_string();
    let claimed_by = match tokens.owner_of(ns.as_str()) {
        NamespaceOwner::Lineage(l) => Some(l),
        _ => None,
    };
    match caller {
        Caller::Trusted => {
            let by_guests =
                claimed_by.is_some() || st.in_namespace(ns).iter().any(|rt| rt.owner.is_some());
            if by_guests {
                return Err(RegisterError::GuestNamespace {
                    namespace: namespace(),
                });
            }
        }
        Caller::Guest(_) => {
            let foreign = st
                .in_namespace(ns)
                .iter()
                .any(|rt| !caller.may_change(rt.owner.as_ref()))
                || claimed_by.is_some_and(|l| !caller.may_change(Some(&l)));
            if foreign {
                return Err(RegisterError::ForeignNamespace {
                    namespace: namespace(),
                });
            }
        }
    }
    Ok(())
}

/// What a registration publishes: a handler's language, source and
/// description and schemas, validated at the edge.
pub struct Handler {
    pub lang: Lang,
    pub source: String,
    /// What callers are shown: description and schemas.
    pub shown: Shown,
}

/// Builds what the bus serves for one published function (its spec and
/// handler, for an id, its language and what callers are shown): the edge's code
/// (`functions::handler_call`), handed in so the manager never names the
/// edge nor builds bus JSON.
pub type HandlerEdge = fn(Weak<Manager>, &str, Lang, Shown) -> (FunctionSpec, crate::bus::Handler);

/// Publishes a handler for `caller`, served on the bus by what `edge`
/// builds (the edge owns decoding a call's JSON; the manager does not).
/// Validation runs inside the namespace runtime before the id is
/// published. A guest registers only into a fresh namespace (which its
/// lineage then owns) or one it owns.
pub(super) async fn register(
    m: &Manager,
    caller: &Caller,
    fid: FunctionId,
    handler: Handler,
    edge: HandlerEdge,
) -> Result<(), RegisterError> {
    let Handler {
        lang,
        source,
        shown,
    } = handler;
    let source = source.as_str();
    let id = fid.as_str().to_string();
    if !m.book.lock().reserve(&id) {
        return Err(RegisterError::IdTaken);
    }
    let result = register_reserved(m, caller, &fid, lang, source, shown, edge).await;
    m.book.lock().unreserve(&id);
    result
}

async fn register_reserved(
    m: &Manager,
    caller: &Caller,
    fid: &FunctionId,
    lang: Lang,
    source: &str,
    shown: Shown,
    edge: HandlerEdge,
) -> Result<(), RegisterError> {
    let id = fid.as_str();
    check_namespace_owner(m, caller, fid.namespace())?;
    // Anyone on the bus may own it already.
    match crate::bus::is_served(m.bus.as_ref(), id).await {
        Ok(true) => return Err(RegisterError::IdOnTheBus),
        Ok(false) => {}
        Err(e) => return Err(RegisterError::IdCheck(e)),
    }
    // A reaped namespace runtime is replaced once, transparently.
    for attempt in 0..2 {
        let (rt, fresh) = namespace_runtime(m, caller, fid.namespace(), lang).await?;
        match install_handler(m, &rt, fid, source, shown.clone(), edge).await {
            Err(InstallError::Gone) if attempt == 0 => {
                teardown::expire(m, &rt);
                continue;
            }
            Err(InstallError::Gone) => return Err(RegisterError::Expired),
            Err(InstallError::Failed(e)) => {
                if fresh && m.book.lock().function_count(&rt) == 0 {
                    // Do not keep a VM for a namespace that holds nothing.
                    teardown::forget(m, &rt);
                    lifecycle::runtime(m, EventKind::RuntimeTornDown, &rt, None);
                    rt.vm.stop().await;
                }
                return Err(e);
            }
            Ok(()) => return Ok(()),
        }
    }
    Err(RegisterError::Expired)
}

/// Refuses a guest whose lineage does not own every live runtime of
/// `ns` (a fresh namespace has none, so anyone may take it).
fn check_namespace_owner(
    m: &Manager,
    caller: &Caller,
    ns: &Namespace,
) -> Result<(), RegisterError> {
    owned_by_another(&m.book.lock(), &m.tokens, caller, ns)
}

/// The runtime of (namespace, lang), created on first use.
async fn namespace_runtime(
    m: &Manager,
    caller: &Caller,
    ns: &Namespace,
    lang: Lang,
) -> Result<(Arc<Runtime>, bool), RegisterError> {
    let gate = m.book.gate(ns, lang);
    let _held = gate.lock().await;
    check_namespace_owner(m, caller, ns)?;
    if let Some(rt) = m.book.lock().namespace_runtime(ns, lang) {
        return Ok((rt, false));
    }
    let admitted = m.tenants.admit(caller).map_err(RegisterError::Tenant)?;
    let acquired = acquire::acquire(m, lang, false).await.map_err(|e| {
        RegisterError::AcquireVm(DaemonFailure::new(e, m.config.default_timeout_ms))
    })?;
    let id = RuntimeId::generate();
    let token = m.mint_guest_token(Some(ns), &admitted);
    let (rt, held) = Runtime::new(
        id,
        acquired.vm,
        Some(ns.clone()),
        m.config.handler_concurrency,
        token,
        admitted,
        None,
    );
    if rt.owner.is_some() && !m.tenants.root_alive(&rt.lineage) {
        // Its root ended while the VM booted: nobody could reach it.
        rt.vm.stop().await;
        return Err(RegisterError::Expired);
    }
    let adopted = {
        let mut st = m.book.lock();
        // Another lineage may have taken the namespace (in its other
        // language) while this VM booted.
        owned_by_another(&st, &m.tokens, caller, ns).map(|()| {
            m.tokens.hold(ns.as_str(), rt.owner.as_ref());
            st.adopt(rt.clone(), held);
        })
    };
    if let Err(e) = adopted {
        rt.vm.stop().await;
        return Err(e);
    }
    lifecycle::runtime(m, EventKind::RuntimeCreated, &rt, None);
    Ok((rt, true))
}

async fn install_handler(
    m: &Manager,
    rt: &Arc<Runtime>,
    fid: &FunctionId,
    source: &str,
    shown: Shown,
    edge: HandlerEdge,
) -> Result<(), InstallError> {
    if m.book.lock().function_count(rt) >= MAX_FUNCTIONS_PER_RUNTIME {
        return Err(InstallError::Failed(RegisterError::TooManyFunctions {
            limit: MAX_FUNCTIONS_PER_RUNTIME,
        }));
    }
    let budget = m.config.clamp_timeout(None);
    let seq = m.book.next_seq();
    let path = guest::handler_module_path(rt.lang(), seq, fid.as_str());
    let slot = rt.slots.acquire(REGISTRATIONS).await;
    let gone_or = |e: SandboxError| {
        if e.is_gone() {
            InstallError::Gone
        } else {
            InstallError::Failed(RegisterError::Install(DaemonFailure::new(e, budget)))
        }
    };
    rt.vm.write_file(&path, source).await.map_err(gone_or)?;
    if !rt.vm.has_sdk() && guest::names_iii(source) {
        m.prepare_sdk(&rt.vm, rt.vm.pristine())
            .await
            .map_err(gone_or)?;
    }
    let secret = guest::new_secret();
    let check = guest::invoke_exec(
        rt.lang(),
        fid.as_str(),
        &path,
        InvokeMode::Check,
        &Value::Null,
        &secret,
        budget,
    );
    rt.vm.tenant_code_ran();
    let out = ready::exec_call(
        m.config.prestart_mode(),
        &rt.vm,
        for_runtime(m, rt, check),
        Then::ServesAgain,
        rt.slots.size(),
    )
    .await
    .map_err(gone_or)?;
    drop(slot);
    match guest::parse_frame(&out.stdout, &secret) {
        Frame::Ok(_) => {}
        Frame::Err { kind, message } => {
            let why = match kind {
                FrameError::NoHandler => "must define a callable `handler(payload)`".to_string(),
                FrameError::AsyncHandler => {
                    "`async def handler` is not supported; define a plain `def handler(payload)`"
                        .to_string()
                }
                FrameError::Throw | FrameError::NotJson | FrameError::LoadError => {
                    format!("does not load: {}", tail(&message, 2000))
                }
            };
            return Err(InstallError::Failed(RegisterError::BadHandler { why }));
        }
        Frame::Missing => {
            return Err(InstallError::Failed(RegisterError::BadHandler {
                why: format!(
                    "does not load (exit {:?}): {}",
                    out.exit_code,
                    tail(&out.stderr, 2000)
                ),
            }))
        }
    }
    // Record and publish in one move under the records lock, only into a
    // runtime no teardown, expiry or lineage end has forgotten meanwhile
    // (`teardown::forget` moves it under the same lock).
    let id = fid.as_str().to_string();
    let (spec, handler) = edge(m.me.clone(), &id, rt.lang(), shown);
    {
        let mut records = m.book.lock();
        if !records.publish(rt, &id, path) {
            return Err(InstallError::Gone);
        }
        m.bus.publish(spec, handler);
    }
    tracing::info!(function_id = fid.as_str(), lang = %rt.lang(), "published a handler");
    lifecycle::runtime(m, EventKind::FunctionRegistered, rt, Some(fid.as_str()));
    Ok(())
}
