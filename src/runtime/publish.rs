//! The `register_function` operation: checking the id is free (here and on
//! the bus), the namespace runtime, loading the handler in it, and
//! publishing it on the bus.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::Value;

use super::failure::{infra_error, tail, EXPIRED_FUNCTION};
use super::records::{Runtime, SdkState};
use super::{lock, Manager, MAX_FUNCTIONS_PER_RUNTIME};
use crate::bus::FunctionSpec;
use crate::error::WorkerError;
use crate::events::EventKind;
use crate::guest::{self, Frame, FrameError, InvokeMode};
use crate::ids::{FunctionId, Lang, Namespace, RuntimeId};
use crate::sandbox::SandboxError;

/// Why installing a handler did not finish.
enum InstallError {
    /// The namespace VM was reaped.
    Gone,
    Worker(WorkerError),
}

impl Manager {
    /// Publishes a handler. Validation runs inside the namespace runtime
    /// before the id is published.
    pub async fn register(
        &self,
        fid: FunctionId,
        lang: Lang,
        source: &str,
        description: Option<String>,
    ) -> Result<(), WorkerError> {
        let id = fid.as_str().to_string();
        {
            let mut st = lock(&self.state);
            if st.functions.contains_key(&id) || !st.reserved.insert(id.clone()) {
                return Err(WorkerError::invalid("function_id", "is already registered"));
            }
        }
        let result = self
            .register_reserved(&fid, lang, source, description)
            .await;
        lock(&self.state).reserved.remove(&id);
        result
    }

    async fn register_reserved(
        &self,
        fid: &FunctionId,
        lang: Lang,
        source: &str,
        description: Option<String>,
    ) -> Result<(), WorkerError> {
        let id = fid.as_str();
        // Anyone on the bus may own it already.
        match crate::bus::is_served(self.bus.as_ref(), id).await {
            Ok(true) => {
                return Err(WorkerError::invalid(
                    "function_id",
                    "is already registered on the bus",
                ))
            }
            Ok(false) => {}
            Err(e) => {
                return Err(WorkerError::Engine(format!(
                    "cannot check whether the id is free: {}: {}",
                    e.code, e.message
                )))
            }
        }
        // A reaped namespace runtime is replaced once, transparently.
        for attempt in 0..2 {
            let (rt, fresh) = self.namespace_runtime(fid.namespace(), lang).await?;
            match self
                .install_handler(&rt, fid, source, description.clone())
                .await
            {
                Err(InstallError::Gone) if attempt == 0 => {
                    self.expire(&rt);
                    continue;
                }
                Err(InstallError::Gone) => {
                    return Err(WorkerError::Expired(EXPIRED_FUNCTION.into()))
                }
                Err(InstallError::Worker(e)) => {
                    if fresh && lock(&rt.functions).is_empty() {
                        // Do not keep a VM for a namespace that holds nothing.
                        self.forget(&rt);
                        self.lifecycle(EventKind::RuntimeTornDown, &rt, None);
                        self.stop_vm(&rt.sandbox_id).await;
                    }
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
        Err(WorkerError::Expired(EXPIRED_FUNCTION.into()))
    }

    /// The runtime of (namespace, lang), created on first use.
    async fn namespace_runtime(
        &self,
        ns: &Namespace,
        lang: Lang,
    ) -> Result<(Arc<Runtime>, bool), WorkerError> {
        let key = (ns.clone(), lang);
        let gate = lock(&self.namespace_locks)
            .entry(key.clone())
            .or_default()
            .clone();
        let _held = gate.lock().await;
        {
            let st = lock(&self.state);
            if let Some(rt) = st.namespaces.get(&key).and_then(|id| st.runtimes.get(id)) {
                return Ok((rt.clone(), false));
            }
        }
        let vm = self
            .acquire_vm(lang, false)
            .await
            .map_err(|e| infra_error(e, self.config.default_timeout_ms))?;
        let sandbox_id = vm.id;
        let id = RuntimeId::generate();
        self.tokens.hold(ns.as_str());
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
            self.mint_guest_token(Some(ns)),
        );
        {
            let mut st = lock(&self.state);
            st.transient.remove(&sandbox_id);
            st.runtimes.insert(id.clone(), rt.clone());
            st.namespaces.insert(key, id);
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
    ) -> Result<(), InstallError> {
        if lock(&rt.functions).len() >= MAX_FUNCTIONS_PER_RUNTIME {
            return Err(InstallError::Worker(WorkerError::invalid(
                "function_id",
                format!("namespace runtime already holds {MAX_FUNCTIONS_PER_RUNTIME} functions"),
            )));
        }
        let budget = self.config.clamp_timeout(None);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = guest::handler_module_path(rt.lang, seq, fid.as_str());
        let mut slot = rt.slot.lock().await;
        let gone_or = |e: SandboxError| {
            if e.is_gone() {
                InstallError::Gone
            } else {
                InstallError::Worker(infra_error(e, budget))
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
            .exec(
                &rt.sandbox_id,
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
                return Err(InstallError::Worker(WorkerError::invalid("source", why)));
            }
            Frame::Missing => {
                return Err(InstallError::Worker(WorkerError::invalid(
                    "source",
                    format!(
                        "does not load (exit {:?}): {}",
                        out.exit_code,
                        tail(&out.stderr, 2000)
                    ),
                )))
            }
        }
        // Publish, then record: the handler looks itself up by id.
        let id = fid.as_str().to_string();
        lock(&rt.functions).insert(id.clone(), path);
        lock(&self.state)
            .functions
            .insert(id.clone(), rt.id.clone());
        let handler = crate::functions::handler_call::handler(self.me.clone(), id.clone());
        self.bus.publish(
            FunctionSpec {
                id,
                description,
                request_format: None,
                response_format: None,
                metadata: Some(serde_json::json!({
                    "worker": "sandbox-code-runner",
                    "lang": rt.lang.as_str(),
                })),
            },
            handler,
        );
        tracing::info!(function_id = fid.as_str(), lang = %rt.lang, "published a handler");
        self.lifecycle(EventKind::FunctionRegistered, rt, Some(fid.as_str()));
        Ok(())
    }
}
