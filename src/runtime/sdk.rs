//! Guest SDK preparation: making `iii` importable in a VM, once, for code
//! that names it (the node bundle is planted here; python goes through
//! `python_sdk`).

use std::sync::{Arc, OnceLock};

use super::Manager;
use crate::error::redact_uuids;
use crate::guest;
use crate::ids::Lang;
use crate::sandbox::{SandboxError, Streamed};

impl Manager {
    /// Makes the guest SDK available, once per VM, for code that names `iii`.
    /// A failure is not the caller's: the run goes on and `iii` explains.
    /// Only a VM that is gone is an error. `pristine`: no tenant code ran in
    /// the VM yet.
    pub(super) async fn prepare_sdk(
        &self,
        sandbox_id: &str,
        lang: Lang,
        pristine: bool,
    ) -> Result<(), SandboxError> {
        match lang {
            Lang::Node => {
                let r = self.plant_node_sdk(sandbox_id).await;
                match r {
                    Err(e) if e.is_gone() => return Err(e),
                    Err(e) => {
                        tracing::warn!(error = %redact_uuids(&e.to_string()), "planting the node SDK failed")
                    }
                    Ok(()) => {}
                }
            }
            Lang::Python => self.prepare_python_sdk(sandbox_id, pristine).await?,
        }
        self.sdk_planted(sandbox_id);
        Ok(())
    }

    /// The node bundle (~0.75 MB) through a data channel, inline without one.
    async fn plant_node_sdk(&self, sandbox_id: &str) -> Result<(), SandboxError> {
        static BUNDLE: OnceLock<Arc<str>> = OnceLock::new();
        let bundle = BUNDLE.get_or_init(|| Arc::from(guest::NODE_SDK_BUNDLE));
        match self
            .write_streamed(sandbox_id, guest::NODE_SDK_PATH, bundle.clone())
            .await?
        {
            Streamed::Written => Ok(()),
            Streamed::NoChannels => {
                self.write_file(sandbox_id, guest::NODE_SDK_PATH, guest::NODE_SDK_BUNDLE)
                    .await
            }
        }
    }
}
