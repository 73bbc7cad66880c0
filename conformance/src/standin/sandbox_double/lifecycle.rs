//! Sandbox lifecycle calls: `sandbox::create`, `sandbox::stop`,
//! `sandbox::list`, `sandbox::catalog::list`, and the state they share.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::daemon::{parse_id, Daemon};
use super::error::DaemonError;
use super::exec::{parse_kv, EnvShape};
use super::network::{GuestNet, GATEWAY, SHARED_GATEWAY};
use super::registry::{capacity_error, Entry, StopClaim, Summary};

/// Catalog presets: name, OCI ref. The double runs them on the host's
/// `/usr/bin/node` and `/usr/bin/python3` (Debian's, with pip), each image
/// with its own shared writable rootfs layer.
pub(crate) const PRESETS: [(&str, &str); 2] = [
    ("python", "docker.io/iiidev/python:latest"),
    ("node", "docker.io/iiidev/node:latest"),
];

/// Rewrites loopback URLs the way the daemon does for `network:true`
/// sandboxes, to the guest's gateway (slirp4netns' `10.0.2.2`, which
/// reaches the host's 127.0.0.1; `127.0.0.1` itself when the host has no
/// slirp4netns and guests share its network). Only a scheme plus an
/// explicit port is touched.
pub(crate) fn rewrite_loopback(kv: &str, gateway: &str) -> String {
    kv.replace("://localhost:", &format!("://{gateway}:"))
        .replace("://127.0.0.1:", &format!("://{gateway}:"))
}

/// `sandbox::create` request. Unknown fields are ignored.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct CreateRequest {
    /// Catalog name: `python` or `node` (never an OCI ref).
    pub(crate) image: String,
    /// vCPUs (accepted, not enforced by the double).
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "part of the daemon's request schema; not enforced"
    )]
    pub(crate) cpus: Option<u32>,
    /// Memory in MiB (accepted, not enforced by the double).
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "part of the daemon's request schema; not enforced"
    )]
    pub(crate) memory_mb: Option<u32>,
    /// Label shown by `sandbox::list`.
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Outbound network (default false); loopback URLs in `env` are
    /// rewritten when true.
    #[serde(default)]
    pub(crate) network: Option<bool>,
    /// Idle seconds before the reaper stops it.
    #[serde(default)]
    pub(crate) idle_timeout_secs: Option<u64>,
    /// Environment of every exec: `["K=V"]` or `{"K":"V"}`.
    #[serde(default)]
    pub(crate) env: EnvShape,
}

/// `sandbox::create` response.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct CreateResponse {
    pub(crate) sandbox_id: String,
    pub(crate) image: String,
}

/// Handles `sandbox::create`, checking in the daemon's order: capacity
/// (S400), image (S100), env names (S001).
pub(crate) async fn handle_create(
    d: &Daemon,
    req: CreateRequest,
) -> Result<CreateResponse, DaemonError> {
    let capacity = d.limits.max_concurrent_sandboxes;
    if d.registry.count() >= capacity {
        return Err(capacity_error(capacity));
    }
    if !PRESETS.iter().any(|(name, _)| *name == req.image) {
        return Err(DaemonError::ImageNotInCatalog(req.image));
    }
    let mut env = req.env.into_kv_vec()?;
    // A network:true guest gets a network of its own (see `network`).
    let net = if req.network == Some(true) {
        let route = d.limits.package_route;
        tokio::task::spawn_blocking(move || GuestNet::open(route))
            .await
            .map_err(|e| DaemonError::BootFailed(format!("network: {e}")))?
            .map_err(|e| DaemonError::BootFailed(format!("network: {e}")))?
            .map(Arc::new)
    } else {
        None
    };
    if req.network == Some(true) {
        let gateway = if net.is_some() {
            GATEWAY
        } else {
            SHARED_GATEWAY
        };
        env = env.iter().map(|kv| rewrite_loopback(kv, gateway)).collect();
    }
    let id = Uuid::new_v4();
    // A handful of mkdirs (the image layer's only on first use): cheap
    // enough to do inline.
    let scratch = d
        .isolation
        .scratch(&req.image, id)
        .map_err(|e| DaemonError::BootFailed(format!("overlay dirs: {e}")))?;
    // The sandbox's namespaces and init, once: every exec then starts in it.
    let vm = match d
        .isolation
        .boot(&scratch, req.network == Some(true), net.clone())
        .await
    {
        Ok(vm) => vm,
        Err(e) => {
            let _ = scratch.remove();
            return Err(DaemonError::BootFailed(format!("boot: {e}")));
        }
    };
    let mut entry = Entry::new(
        req.name,
        req.image.clone(),
        req.idle_timeout_secs
            .unwrap_or(d.limits.default_idle_timeout_secs),
        Duration::from_millis(d.limits.boot_delay_ms),
        Arc::new(scratch),
        vm,
        parse_kv(&env),
    );
    entry.net = net;
    d.registry.insert(id, entry, capacity)?;
    Ok(CreateResponse {
        sandbox_id: id.to_string(),
        image: req.image,
    })
}

/// `sandbox::stop` request; `wait` is accepted and ignored, as on the daemon.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct StopRequest {
    /// UUID returned by `sandbox::create`.
    pub(crate) sandbox_id: String,
    /// Ignored.
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "part of the daemon's request schema; ignored there too"
    )]
    pub(crate) wait: bool,
}

/// `sandbox::stop` response.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct StopResponse {
    pub(crate) sandbox_id: String,
    pub(crate) stopped: bool,
}

/// Handles `sandbox::stop`: S001 bad id, S002 unknown; a sandbox the
/// reaper is stopping answers `stopped:true` at once, one another stop is
/// in its grace for after a grace of its own (as on the daemon).
pub(crate) async fn handle_stop(d: &Daemon, req: StopRequest) -> Result<StopResponse, DaemonError> {
    let id = parse_id(&req.sandbox_id)?;
    match d.registry.begin_stop(id)? {
        StopClaim::Claimed(work) => d.registry.finish_stop(work, d.stop_grace()).await,
        StopClaim::VmEnded => d.registry.finish_stop_again(id, d.stop_grace()).await,
        StopClaim::AlreadyStopping => {}
    }
    Ok(StopResponse {
        sandbox_id: id.to_string(),
        stopped: true,
    })
}

/// `sandbox::list` request (no fields; anything sent is ignored).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub(crate) struct ListRequest {}

/// `sandbox::list` response.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ListResponse {
    pub(crate) sandboxes: Vec<Summary>,
}

/// Handles `sandbox::list`. Never fails; does not reset idle clocks.
pub(crate) fn handle_list(d: &Daemon) -> ListResponse {
    ListResponse {
        sandboxes: d.registry.summaries(),
    }
}

/// `sandbox::catalog::list` request (no fields).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub(crate) struct CatalogListRequest {}

/// Whether an image is bundled or operator-registered.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CatalogKind {
    Preset,
    #[expect(
        dead_code,
        reason = "part of the daemon's response schema; the double registers no image"
    )]
    Custom,
}

/// One catalog row.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct CatalogEntry {
    pub(crate) name: String,
    pub(crate) oci_ref: String,
    pub(crate) kind: CatalogKind,
}

/// `sandbox::catalog::list` response.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct CatalogListResponse {
    pub(crate) images: Vec<CatalogEntry>,
}

/// Handles `sandbox::catalog::list`: the two presets.
pub(crate) fn handle_catalog() -> CatalogListResponse {
    CatalogListResponse {
        images: PRESETS
            .iter()
            .map(|(name, oci)| CatalogEntry {
                name: name.to_string(),
                oci_ref: oci.to_string(),
                kind: CatalogKind::Preset,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("U=ws://localhost:49134", "U=ws://10.0.2.2:49134")]
    #[case("U=http://127.0.0.1:8080/x", "U=http://10.0.2.2:8080/x")]
    #[case("U=http://localhost/", "U=http://localhost/")]
    #[case("U=localhost:80", "U=localhost:80")]
    fn loopback_rewrite(#[case] input: &str, #[case] want: &str) {
        assert_eq!(rewrite_loopback(input, GATEWAY), want);
    }

    #[test]
    fn loopback_rewrite_targets_the_gateway() {
        assert_eq!(
            rewrite_loopback("U=ws://localhost:1,V=ws://127.0.0.1:2", "10.0.0.1"),
            "U=ws://10.0.0.1:1,V=ws://10.0.0.1:2"
        );
    }

    #[test]
    fn bad_uuid_message() {
        let err = parse_id("nope").expect_err("S001");
        assert_eq!(
            err.to_string(),
            "invalid request: sandbox_id is not a valid UUID: nope"
        );
    }

    #[test]
    fn catalog_has_both_presets() {
        let c = handle_catalog();
        let names: Vec<&str> = c.images.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["python", "node"]);
        assert!(c.images.iter().all(|i| i.kind == CatalogKind::Preset));
    }
}
