//! The `register_function` operation: checking the id is free (here and on
//! the bus), the namespace runtime, loading the handler in it, and
//! publishing it on the bus.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use serde_json::Value;

use super::errors::{DaemonFailure, RegisterError};
use super::failure::tail;
use super::ready::Then;
use super::records::{Runtime, SdkState, State, VmFate};
use super::{lock, Manager, MAX_FUNCTIONS_PER_RUNTIME};
use crate::bus::FunctionSpec;
use crate::events::EventKind;
use crate::guest::{self, Frame, FrameError, InvokeMode};
use crate::guest_access::GuestTokens;
use crate::guest_policy::NamespaceOwner;
use crate::ids::{FunctionId, Lang, Namespace, RuntimeId};
use crate::sandbox::SandboxError;
use crate::tenancy::Caller;

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
    st: &State,
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
/// description, validated at the edge.
pub struct Handler {
    pub lang: Lang,
    pub source: String,
    pub description: Option<String>,
}

/// Builds what the bus serves for one published function (its spec and
/// handler, for an id, its language and description): the edge's code
/// (`functions::handler_call`), handed in so the manager never names the
/// edge nor builds bus JSON.
pub type HandlerEdge =
    fn(Weak<Manager>, &str, Lang, Option<String>) -> (FunctionSpec, crate::bus::Handler);

impl Manager {
    /// Publishes a handler for `caller`, served on the bus by what `edge`
    /// builds (the edge owns decoding a call's JSON; the manager does not).
    /// Validation runs inside the namespace runtime before the id is
    /// published. A guest registers only into a fresh namespace (which its
    /// lineage then owns) or one it owns.
    pub async fn register_as(
        &self,
        caller: &Caller,
        fid: FunctionId,
        handler: Handler,
        edge: HandlerEdge,
    ) -> Result<(), RegisterError> {
        let Handler {
            lang,
            source,
            description,
        } = handler;
        let source = source.as_str();
        let id = fid.as_str().to_string();
        if !lock(&self.state).reserve(&id) {
            return Err(RegisterError::IdTaken);
        }
        let result = self
            .register_reserved(caller, &fid, lang, source, description, edge)
            .await;
        lock(&self.state).unreserve(&id);
        result
    }

    async fn register_reserved(
        &self,
        caller: &Caller,
        fid: &FunctionId,
        lang: Lang,
        source: &str,
        description: Option<String>,
        edge: HandlerEdge,
    ) -> Result<(), RegisterError> {
        let id = fid.as_str();
        self.check_namespace_owner(caller, fid.namespace())?;
        // Anyone on the bus may own it already.
        match crate::bus::is_served(self.bus.as_ref(), id).await {
            Ok(true) => return Err(RegisterError::IdOnTheBus),
            Ok(false) => {}
            Err(e) => return Err(RegisterError::IdCheck(e)),
        }
        // A reaped namespace runtime is replaced once, transparently.
        for attempt in 0..2 {
            let (rt, fresh) = self
                .namespace_runtime(caller, fid.namespace(), lang)
                .await?;
            match self
                .install_handler(&rt, fid, source, description.clone(), edge)
                .await
            {
                Err(InstallError::Gone) if attempt == 0 => {
                    self.expire(&rt);
                    continue;
                }
                Err(InstallError::Gone) => return Err(RegisterError::Expired),
                Err(InstallError::Failed(e)) => {
                    if fresh && lock(&rt.functions).is_empty() {
                        // Do not keep a VM for a namespace that holds nothing.
                        self.forget(&rt, VmFate::Stopping);
                        self.lifecycle(EventKind::RuntimeTornDown, &rt, None);
                        self.stop_vm(&rt.sandbox_id).await;
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
    fn check_namespace_owner(&self, caller: &Caller, ns: &Namespace) -> Result<(), RegisterError> {
        owned_by_another(&lock(&self.state), &self.tokens, caller, ns)
    }

    /// The runtime of (namespace, lang), created on first use.
    async fn namespace_runtime(
        &self,
        caller: &Caller,
        ns: &Namespace,
        lang: Lang,
    ) -> Result<(Arc<Runtime>, bool), RegisterError> {
        let key = (ns.clone(), lang);
        let gate = lock(&self.namespace_locks)
            .entry(key.clone())
            .or_default()
            .clone();
        let _held = gate.lock().await;
        self.check_namespace_owner(caller, ns)?;
        if let Some(rt) = lock(&self.state).namespace_runtime(ns, lang) {
            return Ok((rt, false));
        }
        let admitted = self.tenants.admit(caller).map_err(RegisterError::Tenant)?;
        let vm = self.acquire_vm(lang, false).await.map_err(|e| {
            RegisterError::AcquireVm(DaemonFailure::new(e, self.config.default_timeout_ms))
        })?;
        let sandbox_id = vm.id;
        let id = RuntimeId::generate();
        let token = self.mint_guest_token(Some(ns), &admitted);
        let rt = Runtime::new(
            id.clone(),
            sandbox_id.clone(),
            lang,
            Some(ns.clone()),
            if vm.sdk {
                SdkState::Prepared
            } else {
                SdkState::Absent
            },
            token,
            admitted,
        );
        if rt.owner.is_some() && !self.lineage_lives(&rt.lineage) {
            // Its root ended while the VM booted: nobody could reach it.
            self.stop_vm(&sandbox_id).await;
            return Err(RegisterError::Expired);
        }
        let adopted = {
            let mut st = lock(&self.state);
            // Another lineage may have taken the namespace (in its other
            // language) while this VM booted.
            owned_by_another(&st, &self.tokens, caller, ns).map(|()| {
                self.tokens.hold(ns.as_str(), rt.owner.as_ref());
                st.adopt(rt.clone());
            })
        };
        if let Err(e) = adopted {
            self.stop_vm(&sandbox_id).await;
            return Err(e);
        }
        self.lifecycle(EventKind::RuntimeCreated, &rt, None);
        Ok((rt, true))
    }

    async fn install_handler(
        &self,
        rt: &Arc<Runtime>,
        fid: &FunctionId,
        source: &str,
        description: Option<String>,
        edge: HandlerEdge,
    ) -> Result<(), InstallError> {
        if lock(&rt.functions).len() >= MAX_FUNCTIONS_PER_RUNTIME {
            return Err(InstallError::Failed(RegisterError::TooManyFunctions {
                limit: MAX_FUNCTIONS_PER_RUNTIME,
            }));
        }
        let budget = self.config.clamp_timeout(None);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = guest::handler_module_path(rt.lang, seq, fid.as_str());
        let mut slot = rt.slot.lock().await;
        let gone_or = |e: SandboxError| {
            if e.is_gone() {
                InstallError::Gone
            } else {
                InstallError::Failed(RegisterError::Install(DaemonFailure::new(e, budget)))
            }
        };
        self.write_file(&rt.sandbox_id, &path, source)
            .await
            .map_err(gone_or)?;
        if slot.sdk == SdkState::Absent && guest::names_iii(source) {
            self.prepare_sdk(&rt.sandbox_id, rt.lang, slot.pristine)
                .await
                .map_err(gone_or)?;
            slot.sdk = SdkState::Prepared;
        }
        let secret = guest::new_secret();
        let out = self
            .exec_call(
                &rt.sandbox_id,
                rt.lang,
                Manager::for_runtime(
                    rt,
                    guest::invoke_exec(
                        rt.lang,
                        fid.as_str(),
                        &path,
                        InvokeMode::Check,
                        &Value::Null,
                        &secret,
                        budget,
                    ),
                ),
                Then::ServesAgain,
            )
            .await
            .map_err(gone_or)?;
        slot.pristine = false;
        drop(slot);
        match guest::parse_frame(&out.stdout, &secret) {
            Frame::Ok(_) => {}
            Frame::Err { kind, message } => {
                let why = match kind {
                    FrameError::NoHandler => "must define a callable `handler(payload)`".to_string(),
                    FrameError::AsyncHandler => "`async def handler` is not supported; define a plain `def handler(payload)`".to_string(),
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
        // Publish, then record: the handler looks itself up by id.
        let id = fid.as_str().to_string();
        lock(&rt.functions).insert(id.clone(), path);
        lock(&self.state).serve(&id, rt);
        let (spec, handler) = edge(self.me.clone(), &id, rt.lang, description);
        self.bus.publish(spec, handler);
        tracing::info!(function_id = fid.as_str(), lang = %rt.lang, "published a handler");
        self.lifecycle(EventKind::FunctionRegistered, rt, Some(fid.as_str()));
        Ok(())
    }
}
