//! Guest SDK preparation: making `iii` importable in a VM, once, for code
//! that names it (the node bundle is planted here; python goes through
//! `python_sdk`).

use std::sync::{Arc, OnceLock};

use super::lease::VmLease;
use super::python_sdk::{self, Planting};
use crate::error::redact_uuids;
use crate::guest;
use crate::ids::Lang;
use crate::sandbox::{SandboxError, Streamed};

/// Makes the guest SDK available in `vm`, for code that names `iii`, and
/// records it in the VM's entry. A failure is not the caller's: the run
/// goes on and `iii` explains. Only a VM that is gone is an error.
/// `pristine`: no tenant code ran in the VM yet.
pub(super) async fn prepare(
    sdk: Planting<'_>,
    vm: &VmLease,
    pristine: bool,
) -> Result<(), SandboxError> {
    match vm.lang() {
        Lang::Node => match plant_node_sdk(vm).await {
            Err(e) if e.is_gone() => return Err(e),
            Err(e) => {
                tracing::warn!(error = %redact_uuids(&e.to_string()), "planting the node SDK failed")
            }
            Ok(()) => {}
        },
        Lang::Python => python_sdk::prepare(sdk, vm, pristine).await?,
    }
    vm.sdk_prepared();
    Ok(())
}

/// The node bundle (~0.75 MB) through a data channel, inline without one.
async fn plant_node_sdk(vm: &VmLease) -> Result<(), SandboxError> {
    static BUNDLE: OnceLock<Arc<str>> = OnceLock::new();
    let bundle = BUNDLE.get_or_init(|| Arc::from(guest::NODE_SDK_BUNDLE));
    match vm
        .write_streamed(guest::NODE_SDK_PATH, bundle.clone())
        .await?
    {
        Streamed::Written => Ok(()),
        Streamed::NoChannels => {
            vm.write_file(guest::NODE_SDK_PATH, guest::NODE_SDK_BUNDLE)
                .await
        }
    }
}
