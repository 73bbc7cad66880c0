//! The operator's side of the guest listener: the engine config block that
//! `sandbox-code-runner guest-listener-config` prints, and the boot-time
//! check of whether guests can reach the worker's own engine URL.
//!
//! On a real iii-sandbox host the VM's gateway address is forwarded to the
//! host's `127.0.0.1`, on any port, and guests have outbound network. So a
//! listener on `127.0.0.1`, `localhost`, `0.0.0.0` or any routable address
//! is reachable from guest code; one on another host-only loopback address
//! (`127.0.0.2`) is not.

use std::net::{IpAddr, Ipv4Addr};

use crate::guest_access::{GUEST_AUTH, GUEST_MIDDLEWARE, GUEST_REGISTER, GUEST_TRIGGER};

/// Where the main listener goes by default: host-only, outside the gateway.
pub const DEFAULT_MAIN_HOST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// What `guest-listener-config` prints.
#[derive(Debug, Clone)]
pub struct ListenerLayout {
    /// The guest listener's port, on `127.0.0.1` (what the gateway reaches).
    pub guest_port: u16,
    /// The main listener (trusted workers, iii-sandbox, this worker).
    pub main_host: Ipv4Addr,
    pub main_port: u16,
}

/// The engine's `registration_namespace_grace_ms` the printed config sets:
/// how long an unnamed guest connection's registrations wait (the engine's
/// default is 5000).
pub const GUEST_NAME_GRACE_MS: u64 = 250;

impl ListenerLayout {
    /// The engine config's `workers:` entries, then the worker's own two
    /// settings, as YAML with comments.
    pub fn render(&self) -> String {
        let ListenerLayout {
            guest_port,
            main_host,
            main_port,
        } = self;
        format!(
            r#"# iii engine config: two iii-worker-manager listeners.
# Guests may not name themselves (engine::workers::register claims a worker
# name engine-wide), so their registrations wait this long for a name that
# never comes, then land in `default`. Every SDK names itself at once, so
# trusted workers never wait for it.
registration_namespace_grace_ms: {GUEST_NAME_GRACE_MS}
workers:
  # Main listener: trusted workers, iii-sandbox and sandbox-code-runner.
  # On a host-only address the sandbox gateway does not forward to.
  - name: iii-worker-manager
    config:
      host: {main_host}
      port: {main_port}
  # Guest listener: every guest's `iii` connects here with a per-run token.
  # Default deny, decided by the worker (docs/threat-model.md): the auth
  # function forbids sandbox::*, the worker's internals and every engine
  # builtin but logging, context and the function listing (no worker names,
  # no channels), and allows binding only the worker's
  # lifecycle events. The middleware makes each guest one tenant: run,
  # register_function and teardown act only on what its own lineage owns,
  # within its budget; calls to other tenants' functions are refused; calls
  # to this worker's handlers hold a slot of its budget while they run. The
  # registration hook keeps guests to namespaces their lineage owns; the
  # trigger hook scopes subscriptions to the lineage. expose_functions still
  # decides which other workers' functions guests reach: narrow it.
  - name: iii-worker-manager
    config:
      host: 127.0.0.1
      port: {guest_port}
      middleware_function_id: {GUEST_MIDDLEWARE}
      rbac:
        auth_function_id: {GUEST_AUTH}
        on_function_registration_function_id: {GUEST_REGISTER}
        on_trigger_registration_function_id: {GUEST_TRIGGER}
        expose_functions:
          - match("*")
# sandbox-code-runner: start it with --url ws://{main_host}:{main_port}
# and this in its --config file:
#   guest_url: ws://127.0.0.1:{guest_port}
"#
        )
    }
}

/// Whether guest code can open a connection to `url`'s host through the
/// sandbox network (gateway → host `127.0.0.1`, plus outbound traffic).
/// `None` when the URL names no host this can judge.
pub fn reachable_from_guests(url: &str) -> Option<bool> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    if host.eq_ignore_ascii_case("localhost") {
        return Some(true);
    }
    match host.parse::<IpAddr>().ok()? {
        // The guest's own loopback never leaves the VM, except that the
        // gateway lands on the host's 127.0.0.1.
        IpAddr::V4(v4) if v4.is_loopback() => Some(v4 == Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_loopback() => Some(false),
        _ => Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("ws://127.0.0.1:49134", Some(true))]
    #[case("ws://localhost:49134", Some(true))]
    #[case("ws://0.0.0.0:49134", Some(true))]
    #[case("ws://10.1.2.3:49134/x", Some(true))]
    #[case("ws://127.0.0.2:49134", Some(false))]
    #[case("ws://[::1]:49134", Some(false))]
    #[case("ws://engine.internal:49134", None)]
    #[case("nonsense", None)]
    fn reachability_follows_the_gateway(#[case] url: &str, #[case] want: Option<bool>) {
        assert_eq!(reachable_from_guests(url), want);
    }

    #[test]
    fn the_printed_block_is_the_engine_shape() {
        let text = ListenerLayout {
            guest_port: 49135,
            main_host: DEFAULT_MAIN_HOST,
            main_port: 49134,
        }
        .render();
        let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let workers = v["workers"].as_sequence().unwrap();
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[0]["config"]["host"].as_str(), Some("127.0.0.2"));
        assert_eq!(workers[0]["config"]["port"].as_u64(), Some(49134));
        assert_eq!(
            v["registration_namespace_grace_ms"].as_u64(),
            Some(250),
            "guests' registrations wait a quarter second, not the engine's 5 s"
        );
        let rbac = &workers[1]["config"]["rbac"];
        assert_eq!(workers[1]["config"]["host"].as_str(), Some("127.0.0.1"));
        assert_eq!(workers[1]["config"]["port"].as_u64(), Some(49135));
        assert_eq!(rbac["auth_function_id"].as_str(), Some(GUEST_AUTH));
        assert_eq!(
            rbac["on_function_registration_function_id"].as_str(),
            Some(GUEST_REGISTER)
        );
        assert_eq!(rbac["expose_functions"][0].as_str(), Some("match(\"*\")"));
        assert_eq!(
            workers[1]["config"]["middleware_function_id"].as_str(),
            Some(GUEST_MIDDLEWARE)
        );
        assert_eq!(
            rbac["on_trigger_registration_function_id"].as_str(),
            Some(GUEST_TRIGGER)
        );
        assert!(text.contains("guest_url: ws://127.0.0.1:49135"));
        assert_eq!(reachable_from_guests("ws://127.0.0.2:49134"), Some(false));
    }
}
